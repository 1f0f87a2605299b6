"""The in-memory arrays behind the rendered files, kept so that dated drops are sliced rather than re-parsed."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rossmann_jobs.synth.dataset_calendar import Calendar
from rossmann_jobs.synth.trend import Trends
from rossmann_jobs.synth.weather import Weather


@dataclass(frozen=True)
class SalesModel:
    """What the point-in-time floor (synth/point_in_time_floor.py) needs of the sales model besides the calendar."""

    expected: np.ndarray                # [day, store] noise-free expected sales (0 when closed)
    weather_factor: np.ndarray          # [day, state] the weather's factor in expected (weather_scale applied)
    relative_trend_by_week: np.ndarray  # [week, trend file] trend relative to its file's mean
    trend_columns: np.ndarray           # [store] the store's state's trend file
    state_of_store: np.ndarray          # [store] the store's state column
    trend_scale: float = 1.0            # SynthConfig.trend_scale: multiplies the trend elasticities
    shift_factor: np.ndarray | None = None   # [day, store] level shifts' factor in expected (None: no shifts)


@dataclass(frozen=True)
class DataGrids:
    """Day numbers index the calendar; [day, store] grids span train + test days; row arrays are in file order."""

    calendar: Calendar
    trends: Trends
    weather: Weather
    train_day: np.ndarray        # [train.csv row] day number (Date descending, then Store ascending)
    train_store: np.ndarray      # [train.csv row] store index (Store - 1)
    test_day: np.ndarray         # [test.csv row] day number, same order
    test_store: np.ndarray       # [test.csv row] store index
    test_blank_open: np.ndarray  # [test.csv row] Open written blank (the Kaggle quirk)
    sales: np.ndarray            # [day, store]
    customers: np.ndarray        # [day, store]
    is_open: np.ndarray          # [day, store]
    promo: np.ndarray            # [day]
    holiday: np.ndarray          # [day, store] StateHoliday code
    school: np.ndarray           # [day, store]
    sales_model: SalesModel
