"""Permanent store level shifts (a refurbishment, a competitor opening) shortly before the end of the train period."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Shift days lie in the last SHIFT_WINDOW_DAYS up to the last train day, so some are only days old at the forecast
# origin: recent enough that a model sees little of the new level.
SHIFT_WINDOW_DAYS = 120
# |log size| is at least this share of shift_size, so every shift is material.
MIN_SHIFT_SHARE = 1 / 3


@dataclass(frozen=True)
class LevelShifts:
    """The shifted stores (indices, ascending), the day number of each shift and its log size."""

    store: np.ndarray
    first_day: np.ndarray
    log_size: np.ndarray

    def factor(self, num_days: int, num_stores: int) -> np.ndarray:
        """[day, store] multiplicative factor: exp(log_size) from the shift day on (horizon included), else 1."""
        log_factor = np.zeros((num_days, num_stores))
        for store, first_day, log_size in zip(self.store, self.first_day, self.log_size):
            log_factor[first_day:, store] = log_size
        return np.exp(log_factor)


def draw_level_shifts(num_stores: int, num_train_days: int, share: float, size: float,
                      rng: np.random.Generator) -> LevelShifts:
    """round(share x num_stores) stores, each shifted by exp(u) from a day drawn uniformly in the last
    SHIFT_WINDOW_DAYS train days; u uniform on [-size, -size/3] u [size/3, size]."""
    count = int(round(share * num_stores))
    store = np.sort(rng.choice(num_stores, size=count, replace=False))
    window = min(SHIFT_WINDOW_DAYS, num_train_days)
    first_day = rng.integers(num_train_days - window, num_train_days, count)
    magnitude = rng.uniform(MIN_SHIFT_SHARE * size, size, count)
    sign = np.where(rng.random(count) < 0.5, -1.0, 1.0)
    return LevelShifts(store=store, first_day=first_day, log_size=sign * magnitude)
