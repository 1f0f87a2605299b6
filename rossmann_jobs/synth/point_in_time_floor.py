"""The point-in-time floor: the expected sales of D's horizon, the factors unknowable on D replaced by what is known.

The noise floor scores the oracle, which knows each horizon day's real weather and Google trend. On D neither is
known, so no forecast made on D can reach it. The point-in-time expectation keeps every factor that is known on D
(calendar, promo plan, holidays, stores, competition, level shifts up to D) and replaces those that are not:
- weather: the state's weather factor on day d > D becomes its mean over the days within +-7 days of d's date in
  each earlier year, dated <= D (the climatology of the factor itself, so the expectation of the effect rather than
  the effect of an average day); without such days, the factor on D (persistence);
- trend: every horizon day gets the relative trend of the last googletrend week that ended by D, moved by the part
  of the trend that follows from the date (synth/trend.py known_log_interest: the Christmas peak, the summer dip,
  the growth) to the week the day joins; only the random walks persist. Persisting the whole week instead carried
  the Christmas peak into January (1.12-1.18 x the oracle's sales as of 31 December) and the October level into
  the Christmas weeks, so around Christmas the floor was far from the best forecast D allows. The floor knows the
  trend's season exactly; prepare learns it from the history (features/point_in_time.py);
- level shifts (SynthConfig.shift_share): a shift on or before D is in the data, so it stays; one after D is not
  known yet, so every horizon day keeps the store's level of D.
Scored like the noise floor, it is the floor of a forecast made on D (up to how well the replacements forecast).
"""
from __future__ import annotations

import datetime as dt

import numpy as np

from rossmann_jobs.synth.arrays import DataGrids
from rossmann_jobs.synth.dataset_calendar import HORIZON_DAYS
from rossmann_jobs.synth.sales import trend_factor
from rossmann_jobs.synth.trend import known_log_interest

CLIMATE_WINDOW_DAYS = 7   # as prepare's strict weather climatology (features/point_in_time.py)


def _years_back(day: dt.date, years: int) -> dt.date:
    try:
        return day.replace(year=day.year - years)
    except ValueError:   # Feb 29 in a year without one
        return day.replace(year=day.year - years, day=28)


def climatology(factor: np.ndarray, dates: np.ndarray, as_of_index: int, targets: np.ndarray) -> np.ndarray:
    """[target, state] mean of factor [day, state] over the days <= as_of_index within +-CLIMATE_WINDOW_DAYS of
    each target day's date in every earlier year; the factor on as_of_index where no such day exists."""
    known_dates = dates[: as_of_index + 1]
    first_year = known_dates[0].astype(object).year
    result = np.empty((len(targets), factor.shape[1]))
    for row, target in enumerate(targets):
        day = dates[target].astype(object)
        window = np.zeros(len(known_dates), dtype=bool)
        for years in range(1, day.year - first_year + 1):
            anchor = np.datetime64(_years_back(day, years))
            window |= np.abs((known_dates - anchor).astype(int)) <= CLIMATE_WINDOW_DAYS
        result[row] = factor[: as_of_index + 1][window].mean(axis=0) if window.any() else factor[as_of_index]
    return result


def point_in_time_expected(grids: DataGrids, as_of: dt.date) -> tuple[np.ndarray, np.ndarray]:
    """(horizon day numbers, [day, store] expected sales as known on as_of) for the days after as_of."""
    calendar, model = grids.calendar, grids.sales_model
    as_of_index = int(np.searchsorted(calendar.dates, np.datetime64(as_of)))
    if not (0 <= as_of_index < calendar.num_days and calendar.dates[as_of_index] == np.datetime64(as_of)):
        raise ValueError(f"as-of {as_of} is outside the generated calendar")
    days = np.arange(as_of_index + 1, min(as_of_index + 1 + HORIZON_DAYS, calendar.num_days))
    stores = model.state_of_store

    known_weather = climatology(model.weather_factor, calendar.dates, as_of_index, days)[:, stores]
    real_weather = model.weather_factor[days][:, stores]

    week_ends = np.array([np.datetime64(start + dt.timedelta(days=6)) for start in grids.trends.week_start])
    last_week = int(np.nonzero(week_ends <= np.datetime64(as_of))[0].max())
    relative = model.relative_trend_by_week
    weeks = grids.trends.day_to_week[days]
    season = known_log_interest(grids.trends.week_start)
    moved = relative[[last_week]] * np.exp(season[weeks] - season[last_week])[:, None]
    known_trend = trend_factor(moved[:, model.trend_columns], moved[:, 0], model.trend_scale)
    joined = relative[weeks]
    real_trend = trend_factor(joined[:, model.trend_columns], joined[:, 0], model.trend_scale)

    known = model.expected[days] * (known_weather / real_weather) * (known_trend / real_trend)
    if model.shift_factor is not None:
        known = known * (model.shift_factor[as_of_index] / model.shift_factor[days])
    return days, known
