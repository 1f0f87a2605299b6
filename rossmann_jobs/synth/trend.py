"""Weekly Google-trend index per state and for Germany (googletrend.csv), and the day -> trend-row join."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

from rossmann_jobs.synth.dataset_calendar import Calendar
from rossmann_jobs.synth.states import trend_file_names

FIRST_WEEK_SUNDAY = dt.date(2012, 12, 2)
NUM_WEEKS = 148   # Sunday..Saturday weeks up to 2015-09-27 .. 2015-10-03, covering train and test


@dataclass(frozen=True)
class Trends:
    week_start: list[dt.date]    # Sundays
    values: np.ndarray           # [week, file] int 0..100, files in trend_file_names() order (Rossmann_DE first)
    day_to_week: np.ndarray      # [day] the week row the reference pipeline joins to that day

    @staticmethod
    def week_text(sunday: dt.date) -> str:
        return f"{sunday.isoformat()} - {(sunday + dt.timedelta(days=6)).isoformat()}"


def reference_join_weeks(calendar: Calendar, week_start: list[dt.date]) -> np.ndarray:
    """Index of the trend row each day gets in the reference pipeline.

    The reference joins on (year(Date), weekofyear(Date)) of the row against the same of the week's Sunday
    (ISO weeks, calendar years), so e.g. 2013-12-30 (ISO week 1) picks the week of Sunday 2013-01-06. The sales
    model reads the trend through this same join, so what the model sees is what drives sales.
    """
    by_key = {(sunday.year, sunday.isocalendar().week): i for i, sunday in enumerate(week_start)}
    keys = zip(calendar.year.tolist(), calendar.iso_week.tolist())
    return np.array([by_key[key] for key in keys])


def known_log_interest(week_start: list[dt.date]) -> np.ndarray:
    """[week] the part of every file's log interest that follows from the week's date alone: the Christmas peak,
    the summer dip and a growth of 5 % a year (weeks counted from the first). The rest is random walks and noise."""
    day_of_year = np.array([s.timetuple().tm_yday for s in week_start], dtype=float)
    years = np.array([(s - FIRST_WEEK_SUNDAY).days // 7 for s in week_start]) / 52.0
    christmas = 0.30 * np.exp(-0.5 * (np.minimum(np.abs(day_of_year - 352), 365 - np.abs(day_of_year - 352)) / 12) ** 2)
    summer_dip = -0.08 * np.exp(-0.5 * ((day_of_year - 210) / 30) ** 2)
    return np.log1p(christmas + summer_dip) + 0.05 * years


def generate_trends(calendar: Calendar, rng: np.random.Generator) -> Trends:
    week_start = [FIRST_WEEK_SUNDAY + dt.timedelta(weeks=i) for i in range(NUM_WEEKS)]
    num_files = len(trend_file_names())
    national = np.cumsum(rng.normal(0, 0.015, (NUM_WEEKS, 1)), axis=0)
    own = np.cumsum(rng.normal(0, 0.012, (NUM_WEEKS, num_files)), axis=0) + rng.normal(0, 0.03, (NUM_WEEKS, num_files))
    own[:, 0] = 0.0   # Rossmann_DE is the national series itself
    interest = np.exp(known_log_interest(week_start)[:, None] + national + own
                      + rng.normal(0, 0.05, (1, num_files)))
    values = np.round(100 * interest / interest.max(axis=0, keepdims=True)).astype(int)
    return Trends(week_start=week_start, values=values, day_to_week=reference_join_weeks(calendar, week_start))
