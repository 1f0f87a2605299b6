"""Which store is open on which day: Sundays, public holidays, refurbishments and rare one-day closures."""
from __future__ import annotations

import numpy as np

from rossmann_jobs.synth.dataset_calendar import Calendar
from rossmann_jobs.synth.stores import Stores

HOLIDAY_OPEN_TYPE_B = 0.85   # train-station stores (type b) mostly open on public holidays ...
HOLIDAY_OPEN_OTHERS = 0.02   # ... nearly all others close
ONE_DAY_CLOSURE = 0.002
OPEN_WITHOUT_SALES = 5e-5    # the real train.csv has a few Open = 1 rows with Sales = 0


def open_days(calendar: Calendar, stores: Stores, holiday: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[day, store] Open flag; holiday is the [day, store] StateHoliday code."""
    shape = (calendar.num_days, stores.count)
    is_open = np.ones(shape, dtype=bool)
    is_open &= (calendar.day_of_week != 7)[:, None] | stores.sunday_open[None, :]
    holiday_open_chance = np.where(stores.store_type == "b", HOLIDAY_OPEN_TYPE_B, HOLIDAY_OPEN_OTHERS)
    is_open &= (holiday == 0) | (rng.random(shape) < holiday_open_chance[None, :])
    is_open &= rng.random(shape) >= ONE_DAY_CLOSURE
    day = np.arange(calendar.num_days)[:, None]
    first = stores.refurbish_first_day[None, :]
    is_open &= ~((first >= 0) & (day >= first) & (day < first + stores.refurbish_days[None, :]))
    return is_open


def open_without_sales(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """[day, store] rows that are open but record no sale (a data-entry quirk of the real file)."""
    return rng.random(shape) < OPEN_WITHOUT_SALES
