"""The 7 files of rossmann.tgz rendered as CSV bytes, with the real files' columns, row order and quoting quirks."""
from __future__ import annotations

import datetime as dt

import numpy as np

from rossmann_jobs.synth.arrays import DataGrids
from rossmann_jobs.synth.csvtext import int_field, minimal, optional_number_field, quoted, render, text_field
from rossmann_jobs.synth.dataset_calendar import STATE_HOLIDAY_LETTERS, Calendar
from rossmann_jobs.synth.states import STATE_NAMES, trend_file_names
from rossmann_jobs.synth.stores import PROMO_INTERVALS, Stores
from rossmann_jobs.synth.trend import Trends
from rossmann_jobs.synth.weather import DECIMAL_COLUMNS, WEATHER_COLUMNS, Weather, event_label

TRAIN_COLUMNS = ("Store", "DayOfWeek", "Date", "Sales", "Customers", "Open", "Promo", "StateHoliday", "SchoolHoliday")
TEST_COLUMNS = ("Id", "Store", "DayOfWeek", "Date", "Open", "Promo", "StateHoliday", "SchoolHoliday")
STORE_COLUMNS = ("Store", "StoreType", "Assortment", "CompetitionDistance", "CompetitionOpenSinceMonth",
                 "CompetitionOpenSinceYear", "Promo2", "Promo2SinceWeek", "Promo2SinceYear", "PromoInterval")
STORE_STATES_COLUMNS = ("Store", "State")
STATE_NAMES_COLUMNS = ("StateName", "State")
GOOGLETREND_COLUMNS = ("file", "week", "trend")
WEATHER_FILE_COLUMNS = ("file", "Date", *WEATHER_COLUMNS)

# The real train.csv writes "no state holiday" as a plain 0 in older rows and as a quoted "0" in newer ones.
QUOTED_ZERO_FROM = dt.date(2014, 1, 1)


def _state_holiday_field(calendar: Calendar, day: np.ndarray, code: np.ndarray, quote_zero: bool) -> np.ndarray:
    letters = np.array(STATE_HOLIDAY_LETTERS, dtype=object)[code]
    if quote_zero:
        newer = calendar.dates[day] >= np.datetime64(QUOTED_ZERO_FROM)
        letters[(code == 0) & newer] = quoted("0")
    return letters


def train_csv(grids: DataGrids, day: np.ndarray, store: np.ndarray) -> bytes:
    """Rows (day[i], store[i]) in the given order; the grids hold the values."""
    calendar = grids.calendar
    return render(TRAIN_COLUMNS, [
        int_field(store + 1),
        int_field(calendar.day_of_week[day]),
        calendar.date_text[day],
        int_field(grids.sales[day, store]),
        int_field(grids.customers[day, store]),
        int_field(grids.is_open[day, store]),
        int_field(grids.promo[day]),
        _state_holiday_field(calendar, day, grids.holiday[day, store], quote_zero=True),
        int_field(grids.school[day, store]),
    ])


def test_csv(grids: DataGrids, day: np.ndarray, store: np.ndarray, blank_open: np.ndarray) -> bytes:
    """Rows (day[i], store[i]) in the given order with Id 1..N; Open is left blank where blank_open[i]."""
    calendar = grids.calendar
    open_text = int_field(grids.is_open[day, store])
    open_text[blank_open] = ""
    return render(TEST_COLUMNS, [
        int_field(np.arange(1, len(day) + 1)),
        int_field(store + 1),
        int_field(calendar.day_of_week[day]),
        calendar.date_text[day],
        open_text,
        int_field(grids.promo[day]),
        _state_holiday_field(calendar, day, grids.holiday[day, store], quote_zero=False),
        int_field(grids.school[day, store]),
    ])


def _blank_zero(values: np.ndarray) -> np.ndarray:
    return np.where(values == 0, np.nan, values.astype(float))


def store_csv(stores: Stores) -> bytes:
    intervals = np.array([""] + [quoted(text) for text in PROMO_INTERVALS], dtype=object)
    return render(STORE_COLUMNS, [
        int_field(stores.store_id),
        stores.store_type,
        stores.assortment,
        optional_number_field(stores.competition_distance),
        optional_number_field(_blank_zero(stores.competition_open_month)),
        optional_number_field(_blank_zero(stores.competition_open_year)),
        int_field(stores.promo2),
        optional_number_field(_blank_zero(stores.promo2_since_week)),
        optional_number_field(_blank_zero(stores.promo2_since_year)),
        intervals[stores.promo_interval + 1],
    ])


def store_states_csv(stores: Stores) -> bytes:
    return render(STORE_STATES_COLUMNS, [int_field(stores.store_id), text_field(stores.state)])


def state_names_csv() -> bytes:
    names, codes = zip(*STATE_NAMES)
    return render(STATE_NAMES_COLUMNS, [text_field(names), text_field(codes)])


def googletrend_csv(trends: Trends, num_weeks: int | None = None) -> bytes:
    """Grouped by file, weeks ascending (the first num_weeks, default all); the week is written quoted,
    "YYYY-MM-DD - YYYY-MM-DD"."""
    files = trend_file_names()
    week_start = trends.week_start[:num_weeks]
    weeks = np.array([quoted(Trends.week_text(sunday)) for sunday in week_start], dtype=object)
    return render(GOOGLETREND_COLUMNS, [
        np.repeat(np.array(files, dtype=object), len(weeks)),
        np.tile(weeks, len(files)),
        int_field(trends.values[: len(weeks)].T.reshape(-1)),
    ])


def weather_csv(calendar: Calendar, weather: Weather, num_days: int | None = None) -> bytes:
    """One row per state per day of the first num_days days (default all), grouped by state (file = StateName),
    dates ascending."""
    num_states = weather.events.shape[1]
    num_days = calendar.num_days if num_days is None else num_days

    def by_state(grid: np.ndarray) -> np.ndarray:
        return grid[:num_days].T.reshape(-1)

    labels = np.array([minimal(event_label(mask)) for mask in range(32)], dtype=object)
    columns = {
        name: optional_number_field(by_state(values), DECIMAL_COLUMNS.get(name, 0))
        for name, values in weather.values.items()
    }
    columns["Events"] = labels[by_state(weather.events)]
    names = np.array([minimal(name) for name, _code in STATE_NAMES], dtype=object)
    return render(WEATHER_FILE_COLUMNS, [
        np.repeat(names[:num_states], num_days),
        np.tile(calendar.date_text[:num_days], num_states),
        *(columns[name] for name in WEATHER_COLUMNS),
    ])
