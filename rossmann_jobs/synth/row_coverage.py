"""Which (store, day) rows the files hold: the 2014-H2 gap stores, the one missing day, test stores, blank Open."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rossmann_jobs.synth.dataset_calendar import GAP_END, GAP_START, TRAIN_START, Calendar
from rossmann_jobs.synth.stores import Stores, scaled_count

GAP_STORES = 180
TEST_STORES = 856
BLANK_OPEN_ROWS = 11     # one test store's last 11 non-Sunday days, as in the real test.csv
MISSING_DAY = TRAIN_START  # the real store 988 lacks 2013-01-01


@dataclass(frozen=True)
class RowLayout:
    gap_store: np.ndarray        # [store] no train rows from GAP_START to GAP_END
    missing_day_store: int       # index of the store that lacks MISSING_DAY
    test_store: np.ndarray       # [store] appears in test.csv
    blank_open_store: int        # index of the test store whose Open is blank on BLANK_OPEN_ROWS days

    def train_present(self, calendar: Calendar) -> np.ndarray:
        """[train day, store] whether train.csv has the row."""
        present = np.ones((calendar.num_train_days, len(self.gap_store)), dtype=bool)
        present[calendar.index_of(GAP_START): calendar.index_of(GAP_END) + 1, self.gap_store] = False
        present[calendar.index_of(MISSING_DAY), self.missing_day_store] = False
        return present

    def blank_open(self, calendar: Calendar) -> np.ndarray:
        """[test day, store] whether test.csv leaves Open blank."""
        blank = np.zeros((calendar.num_days - calendar.num_train_days, len(self.gap_store)), dtype=bool)
        weekdays = np.flatnonzero(calendar.day_of_week[calendar.num_train_days:] != 7)
        blank[weekdays[-BLANK_OPEN_ROWS:], self.blank_open_store] = True
        return blank


def choose_layout(stores: Stores, rng: np.random.Generator) -> RowLayout:
    count = stores.count
    order = rng.permutation(count)
    gap_store = np.zeros(count, dtype=bool)
    gap_store[order[: scaled_count(GAP_STORES, count, 1 if count > 1 else 0)]] = True
    complete = np.flatnonzero(~gap_store)
    test_store = np.zeros(count, dtype=bool)
    test_store[rng.permutation(count)[: scaled_count(TEST_STORES, count, 1)]] = True
    return RowLayout(
        gap_store=gap_store,
        missing_day_store=int(rng.choice(complete if len(complete) else np.arange(count))),
        test_store=test_store,
        blank_open_store=int(rng.choice(np.flatnonzero(test_store))),
    )
