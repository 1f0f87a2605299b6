"""The calendar of the data set: dates, German public and school holidays per state, and the chain's promo weeks."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

TRAIN_START = dt.date(2013, 1, 1)
TRAIN_END = dt.date(2015, 7, 31)
TEST_START = dt.date(2015, 8, 1)
HORIZON_DAYS = 48                 # the Kaggle test period's length: the forecast horizon after the last known day
TEST_END = TEST_START + dt.timedelta(days=HORIZON_DAYS - 1)   # 2015-09-17
GAP_START = dt.date(2014, 7, 1)   # 180 real stores have no train rows from here ...
GAP_END = dt.date(2014, 12, 31)   # ... to here

# StateHoliday codes; index = code, value = the letter written in the CSV.
NO_HOLIDAY, PUBLIC_HOLIDAY, EASTER_HOLIDAY, CHRISTMAS_HOLIDAY = 0, 1, 2, 3
STATE_HOLIDAY_LETTERS = ("0", "a", "b", "c")

NO_EVENT_DAYS = 10_000  # "days since/until an event" where there is none in the whole period


@dataclass(frozen=True)
class Calendar:
    """Daily arrays over train + test (2013-01-01 .. 2015-09-17); index = day number."""

    dates: np.ndarray          # datetime64[D]
    date_text: np.ndarray      # object array of "YYYY-MM-DD"
    day_of_week: np.ndarray    # 1 = Monday .. 7 = Sunday
    year: np.ndarray
    month: np.ndarray
    day: np.ndarray
    iso_week: np.ndarray       # ISO week number, as Spark's weekofyear
    num_train_days: int

    @property
    def num_days(self) -> int:
        return len(self.dates)

    def index_of(self, day: dt.date) -> int:
        return (day - TRAIN_START).days


def build_calendar() -> Calendar:
    days = [TRAIN_START + dt.timedelta(days=i) for i in range((TEST_END - TRAIN_START).days + 1)]
    return Calendar(
        dates=np.array(days, dtype="datetime64[D]"),
        date_text=np.array([d.isoformat() for d in days], dtype=object),
        day_of_week=np.array([d.isoweekday() for d in days]),
        year=np.array([d.year for d in days]),
        month=np.array([d.month for d in days]),
        day=np.array([d.day for d in days]),
        iso_week=np.array([d.isocalendar().week for d in days]),
        num_train_days=(TRAIN_END - TRAIN_START).days + 1,
    )


def easter_sunday(year: int) -> dt.date:
    """Gregorian Easter Sunday (anonymous Gregorian algorithm)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = b // 4, b % 4
    f = (b + 8) // 25
    g = (b - f + 1) // 3
    h = (19 * a + b - d - g + 15) % 30
    i, k = c // 4, c % 4
    l = (32 + 2 * e + 2 * i - h - k) % 7  # noqa: E741 (the algorithm's own name)
    m = (a + 11 * h + 22 * l) // 451
    month = (h + l - 7 * m + 114) // 31
    day = (h + l - 7 * m + 114) % 31 + 1
    return dt.date(year, month, day)


def _public_holidays(year: int) -> list[tuple[dt.date, int, frozenset[str] | None]]:
    """(date, StateHoliday code, states or None for all) of one year (2013-2015 rules)."""
    easter = easter_sunday(year)
    days = dt.timedelta
    repentance = dt.date(year, 11, 22) - days((dt.date(year, 11, 22).weekday() - 2) % 7)  # Wednesday before Nov 23
    return [
        (dt.date(year, 1, 1), PUBLIC_HOLIDAY, None),
        (dt.date(year, 1, 6), PUBLIC_HOLIDAY, frozenset({"BW", "BY", "ST"})),
        (easter - days(2), EASTER_HOLIDAY, None),
        (easter + days(1), EASTER_HOLIDAY, None),
        (dt.date(year, 5, 1), PUBLIC_HOLIDAY, None),
        (easter + days(39), PUBLIC_HOLIDAY, None),
        (easter + days(50), PUBLIC_HOLIDAY, None),
        (easter + days(60), PUBLIC_HOLIDAY, frozenset({"BW", "BY", "HE", "NW", "RP", "SL"})),
        (dt.date(year, 8, 15), PUBLIC_HOLIDAY, frozenset({"BY", "SL"})),
        (dt.date(year, 10, 3), PUBLIC_HOLIDAY, None),
        (dt.date(year, 10, 31), PUBLIC_HOLIDAY, frozenset({"BB", "MV", "SN", "ST", "TH"})),
        (dt.date(year, 11, 1), PUBLIC_HOLIDAY, frozenset({"BW", "BY", "NW", "RP", "SL"})),
        (repentance, PUBLIC_HOLIDAY, frozenset({"SN"})),
        (dt.date(year, 12, 25), CHRISTMAS_HOLIDAY, None),
        (dt.date(year, 12, 26), CHRISTMAS_HOLIDAY, None),
    ]


def state_holidays(calendar: Calendar, state_codes: tuple[str, ...]) -> np.ndarray:
    """[day, state] StateHoliday code (0 none, 1 a public, 2 b Easter, 3 c Christmas)."""
    codes = np.zeros((calendar.num_days, len(state_codes)), dtype=np.int8)
    for year in sorted(set(calendar.year.tolist())):
        for day, code, states in _public_holidays(year):
            index = calendar.index_of(day)
            if not 0 <= index < calendar.num_days:
                continue
            for column, state in enumerate(state_codes):
                if states is None or state in states:
                    codes[index, column] = code
    return codes


def _mark(flags: np.ndarray, calendar: Calendar, column: int, first: dt.date, last: dt.date) -> None:
    start, stop = max(calendar.index_of(first), 0), min(calendar.index_of(last) + 1, calendar.num_days)
    if start < stop:
        flags[start:stop, column] = True


def school_holidays(calendar: Calendar, state_codes: tuple[str, ...]) -> np.ndarray:
    """[day, state] school holiday flag: Christmas, winter (some states), Easter, Whitsun (BW, BY), summer, autumn.

    Summer and autumn breaks are staggered between states and rotate between years, like the real
    Kultusministerkonferenz schedule; the exact dates are synthetic.
    """
    flags = np.zeros((calendar.num_days, len(state_codes)), dtype=bool)
    days = dt.timedelta
    for column, state in enumerate(state_codes):
        for year in range(calendar.year.min() - 1, calendar.year.max() + 1):
            easter = easter_sunday(year)
            _mark(flags, calendar, column, dt.date(year, 12, 23) - days(column % 3), dt.date(year + 1, 1, 4))
            if state in ("BE", "BB", "BY", "SN", "ST", "TH", "HH", "MV"):
                winter = dt.date(year, 2, 1) + days(7 * (column % 3))
                winter -= days(winter.weekday())
                _mark(flags, calendar, column, winter, winter + days(5))
            easter_shift = 7 * (column % 2)
            _mark(flags, calendar, column, easter - days(11 - easter_shift), easter + days(1 + easter_shift))
            if state in ("BW", "BY"):
                _mark(flags, calendar, column, easter + days(51), easter + days(61))
            summer = dt.date(year, 6, 22) + days(7 * ((column * 3 + year) % 6))
            summer -= days(summer.weekday())
            _mark(flags, calendar, column, summer, summer + days(43))
            autumn = dt.date(year, 10, 1) + days(7 * ((column + year) % 4))
            autumn -= days(autumn.weekday())
            _mark(flags, calendar, column, autumn, autumn + days(11 if column % 2 else 4))
    return flags


def promo_days(calendar: Calendar, rng: np.random.Generator) -> np.ndarray:
    """[day] daily Promo flag, the same for every store: Monday..Friday of roughly every other week."""
    week_index = (calendar.dates - calendar.dates[0]).astype(int) + (calendar.day_of_week[0] - 1)
    week_index //= 7
    num_weeks = int(week_index.max()) + 1
    promo_week = np.empty(num_weeks, dtype=bool)
    promo_week[0] = False
    alternate = rng.random(num_weeks) < 0.9  # now and then two promo (or two quiet) weeks follow each other
    for week in range(1, num_weeks):
        promo_week[week] = promo_week[week - 1] != alternate[week]
    return promo_week[week_index] & (calendar.day_of_week <= 5)


def days_since_event(events: np.ndarray) -> np.ndarray:
    """Along axis 0: days since the latest event at or before each day (0 on the day); NO_EVENT_DAYS if none."""
    day = np.arange(events.shape[0]).reshape((-1,) + (1,) * (events.ndim - 1))
    last = np.maximum.accumulate(np.where(events, day, -NO_EVENT_DAYS), axis=0)
    return np.minimum(day - last, NO_EVENT_DAYS)


def days_until_event(events: np.ndarray) -> np.ndarray:
    """Along axis 0: days until the next event at or after each day (0 on the day); NO_EVENT_DAYS if none."""
    return days_since_event(events[::-1])[::-1]
