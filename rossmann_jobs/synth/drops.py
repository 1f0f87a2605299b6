"""Daily drops: what is known on a date D (sales, weather, trend up to D) plus the plan for D+1 .. D+HORIZON_DAYS."""
from __future__ import annotations

import datetime as dt

import numpy as np

from rossmann_jobs.synth import files
from rossmann_jobs.synth.dataset import RAW_FILES, SynthDataset
from rossmann_jobs.synth.dataset_calendar import HORIZON_DAYS, TRAIN_END, TRAIN_START
from rossmann_jobs.synth.trend import Trends

# A drop needs sales up to its date, and the generator has sales only for the train period.
FIRST_DROP_DATE, LAST_DROP_DATE = TRAIN_START, TRAIN_END


def check_drop_date(day: dt.date) -> None:
    """Raise ValueError, naming the valid range, unless a realistic drop can be cut for `day`."""
    if not FIRST_DROP_DATE <= day <= LAST_DROP_DATE:
        raise ValueError(f"drop date {day} is outside {FIRST_DROP_DATE} .. {LAST_DROP_DATE}, the days the generator "
                         f"has sales for; a drop holds the data known on its date and the plan for the next "
                         f"{HORIZON_DAYS} days (use --full-snapshot to land the whole snapshot for any date)")


def forecast_horizon(day: dt.date) -> tuple[dt.date, dt.date]:
    """First and last day of the plan (test.csv) in the drop for `day`: day + 1 .. day + HORIZON_DAYS."""
    return day + dt.timedelta(days=1), day + dt.timedelta(days=HORIZON_DAYS)


class DailyDrops:
    """Cuts the drop for any date out of one generated data set (generate once, slice per drop)."""

    def __init__(self, dataset: SynthDataset):
        self._files = dataset.files
        self._grids = dataset.grids
        train = np.frombuffer(dataset.files["train.csv"], dtype=np.uint8)
        # Byte offset where each line of train.csv starts: line 0 is the header, line i the i-th row.
        self._train_line_start = np.concatenate([[0], np.flatnonzero(train == ord("\n")) + 1])

    def files_on(self, day: dt.date) -> dict[str, bytes]:
        """The 7 files of the drop for `day`, in RAW_FILES order."""
        check_drop_date(day)
        last_known = self._grids.calendar.index_of(day)
        sliced = {
            "train.csv": self._train_until(last_known),
            "test.csv": self._plan_after(last_known),
            "googletrend.csv": files.googletrend_csv(self._grids.trends, _weeks_ended_by(self._grids.trends, day)),
            "weather.csv": files.weather_csv(self._grids.calendar, self._grids.weather, num_days=last_known + 1),
        }
        return {name: sliced.get(name, self._files[name]) for name in RAW_FILES}

    def _train_until(self, last_known: int) -> bytes:
        """The full train.csv's rows dated <= last_known, byte for byte.

        train.csv is ordered Date descending, so those rows are the file's tail: no re-rendering needed.
        """
        data, line_start = self._files["train.csv"], self._train_line_start
        newer_rows = int(np.count_nonzero(self._grids.train_day > last_known))
        return data[: line_start[1]] + data[line_start[1 + newer_rows]:]

    def _plan_after(self, last_known: int) -> bytes:
        """test.csv for the horizon: the (Store, day) rows the full data set has on each day, with their plan."""
        grids = self._grids
        first, last = last_known + 1, last_known + HORIZON_DAYS
        in_test = (grids.test_day >= first) & (grids.test_day <= last)
        in_train = (grids.train_day >= first) & (grids.train_day <= last)
        # Both row lists are Date descending then Store ascending, and every test day follows every train day:
        # test rows first keeps the test.csv order.
        day = np.concatenate([grids.test_day[in_test], grids.train_day[in_train]])
        store = np.concatenate([grids.test_store[in_test], grids.train_store[in_train]])
        blank_open = np.concatenate([grids.test_blank_open[in_test], np.zeros(np.count_nonzero(in_train), bool)])
        return files.test_csv(grids, day, store, blank_open)


def _weeks_ended_by(trends: Trends, day: dt.date) -> int:
    """How many leading googletrend weeks (Sunday .. Saturday, ascending) end on or before `day`."""
    return sum(1 for sunday in trends.week_start if sunday + dt.timedelta(days=6) <= day)
