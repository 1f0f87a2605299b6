"""Builds the whole synthetic data set in memory: the 7 CSV files, the truth summary and the per-row expected values."""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from rossmann_jobs.synth import files
from rossmann_jobs.synth.arrays import DataGrids, SalesModel
from rossmann_jobs.synth.dataset_calendar import (
    TEST_END,
    TEST_START,
    TRAIN_END,
    TRAIN_START,
    build_calendar,
    promo_days,
    school_holidays,
    state_holidays,
)
from rossmann_jobs.synth.opening import open_days, open_without_sales
from rossmann_jobs.synth.point_in_time_floor import point_in_time_expected
from rossmann_jobs.synth.row_coverage import choose_layout
from rossmann_jobs.synth.sales import expected_sales, observe, sales_factors, weather_factor
from rossmann_jobs.synth.shifts import LevelShifts, draw_level_shifts
from rossmann_jobs.synth.states import STATE_CODES, trend_code, trend_file_names
from rossmann_jobs.synth.stores import generate_stores, scale_growth
from rossmann_jobs.synth.trend import generate_trends
from rossmann_jobs.synth.truth import (
    best_scaled_floor,
    expected_values_parquet,
    floor_entry,
    theoretical_floor,
    validation_window,
)
from rossmann_jobs.synth.weather import generate_weather

log = logging.getLogger("rossmann.synth")

RAW_FILES = ("train.csv", "test.csv", "store.csv", "store_states.csv", "state_names.csv", "googletrend.csv",
             "weather.csv")
DEFAULT_STORES, DEFAULT_SEED, DEFAULT_SIGMA = 1115, 42, 0.1
# One independent random stream per component, so e.g. a new weather draw does not reshuffle the stores.
STREAMS = {"stores": 1, "layout": 2, "promo": 3, "weather": 4, "trend": 5, "opening": 6, "noise": 7, "shifts": 8}
# The sales-model knobs (robustness scenarios, synth/scenarios.py): (lowest, highest, what it is). Their defaults
# reproduce the data set as it was before they existed, byte for byte.
KNOB_RANGES = {
    "growth_scale": (0.0, 10.0, "multiplier on each store's yearly log-growth"),
    "shift_share": (0.0, 1.0, "share of stores with a permanent level shift"),
    "shift_size": (0.0, 1.0, "log-size scale of a level shift"),
    "weather_scale": (0.0, 5.0, "strength of the weather effect in log terms"),
    "trend_scale": (0.0, 5.0, "multiplier on the Google-trend elasticities"),
}
POSITIVE_KNOBS = {"shift_size"}   # 0 would make every shift vanish: refused rather than silently ignored


@dataclass(frozen=True)
class SynthConfig:
    stores: int = DEFAULT_STORES
    seed: int = DEFAULT_SEED
    sigma: float = DEFAULT_SIGMA
    growth_scale: float = 1.0     # 3 = stores grow or decline 3x faster
    shift_share: float = 0.0      # stores with a level shift in the last 120 train days
    shift_size: float = 0.15      # shift factor exp(u), u ~ uniform(+-shift_size) with |u| >= shift_size / 3
    weather_scale: float = 1.0    # weather factor w becomes w ** weather_scale
    trend_scale: float = 1.0      # multiplies TREND_ELASTICITY and TREND_DE_ELASTICITY

    def validate(self) -> None:
        if self.stores < 1:
            raise ValueError(f"--stores must be at least 1, got {self.stores}")
        if self.seed < 0:
            raise ValueError(f"--seed must be a non-negative integer, got {self.seed}")
        if not (0.0 <= self.sigma <= 2.0):
            raise ValueError(f"--sigma must be within 0 .. 2 (log-scale noise), got {self.sigma}")
        for name, (lowest, highest, what) in KNOB_RANGES.items():
            value = getattr(self, name)
            positive = name in POSITIVE_KNOBS
            # NaN fails every comparison, so it is refused too.
            if not (lowest <= value <= highest) or (positive and value == lowest):
                bounds = (f"above {lowest:g} and at most {highest:g}" if positive
                          else f"within {lowest:g} .. {highest:g}")
                raise ValueError(f"--{name.replace('_', '-')} ({what}) must be {bounds}, got {value}")

    def knobs(self) -> dict[str, float]:
        """The sales-model knobs (KNOB_RANGES) and their values."""
        return {name: value for name, value in asdict(self).items() if name in KNOB_RANGES}

    def knobs_are_default(self) -> bool:
        return all(getattr(self, f.name) == f.default for f in fields(self) if f.name in KNOB_RANGES)


@dataclass(frozen=True)
class SynthDataset:
    files: dict[str, bytes]      # file name -> CSV bytes, in RAW_FILES order
    truth: dict                  # JSON-ready summary (see build_truth)
    expected_parquet: bytes      # per-row truth for train and test rows
    grids: DataGrids = field(repr=False, compare=False)   # numpy arrays: not meaningful in == or repr


def _rng(seed: int, stream: str) -> np.random.Generator:
    return np.random.default_rng([STREAMS[stream], seed])


def _level_shifts(config: SynthConfig, num_stores: int, num_train_days: int) -> LevelShifts | None:
    """The level shifts, from their own stream; None (nothing drawn) without any, so no other output moves."""
    if config.shift_share == 0.0:
        return None
    return draw_level_shifts(num_stores, num_train_days, config.shift_share, config.shift_size,
                             _rng(config.seed, "shifts"))


def _settings(config: SynthConfig, calendar, shifts: LevelShifts | None) -> dict:
    """The truth's record of non-default knobs (and the shifts drawn); empty at the defaults, whose truth JSON stays
    byte-identical to the one written before the knobs existed."""
    if config.knobs_are_default():
        return {}
    level_shifts = [] if shifts is None else [
        {"Store": int(store) + 1, "Date": str(calendar.dates[day]), "log_size": float(log_size)}
        for store, day, log_size in zip(shifts.store, shifts.first_day, shifts.log_size)]
    return {"settings": config.knobs(), "level_shifts": level_shifts}


def _rows(mask: np.ndarray, first_day: int) -> tuple[np.ndarray, np.ndarray]:
    """(day, store) of the True cells of a [day, store] mask, ordered by Date descending, then Store ascending."""
    reversed_day, store = np.nonzero(mask[::-1])
    return first_day + mask.shape[0] - 1 - reversed_day, store


def build_dataset(config: SynthConfig) -> SynthDataset:
    config.validate()
    calendar = build_calendar()
    stores = scale_growth(generate_stores(config.stores, _rng(config.seed, "stores"), calendar.num_train_days),
                          config.growth_scale)
    shifts = _level_shifts(config, stores.count, calendar.num_train_days)
    shift_factor = None if shifts is None else shifts.factor(calendar.num_days, stores.count)
    layout = choose_layout(stores, _rng(config.seed, "layout"))
    state_of_store = np.array([STATE_CODES.index(state) for state in stores.state])
    holiday_by_state = state_holidays(calendar, STATE_CODES)
    school_by_state = school_holidays(calendar, STATE_CODES)
    promo = promo_days(calendar, _rng(config.seed, "promo"))
    weather = generate_weather(calendar, len(STATE_CODES), _rng(config.seed, "weather"))
    trends = generate_trends(calendar, _rng(config.seed, "trend"))
    trend_columns = np.array([trend_file_names().index(f"Rossmann_DE_{trend_code(s)}") for s in stores.state])
    relative_trend_by_week = trends.values / trends.values.mean(axis=0)
    relative_trend_by_day = relative_trend_by_week[trends.day_to_week]

    holiday = holiday_by_state[:, state_of_store]
    school = school_by_state[:, state_of_store]
    opening_rng = _rng(config.seed, "opening")
    is_open = open_days(calendar, stores, holiday, opening_rng)
    zero_sales = open_without_sales(is_open.shape, opening_rng) & is_open
    factors = sales_factors(calendar, stores, state_of_store, holiday_by_state, school_by_state, promo, weather,
                            relative_trend_by_day[:, trend_columns], relative_trend_by_day[:, 0],
                            weather_scale=config.weather_scale, trend_scale=config.trend_scale,
                            shift=shift_factor)
    expected = expected_sales(factors, is_open)
    sales, customers = observe(expected, config.sigma, stores.basket, zero_sales, _rng(config.seed, "noise"))

    train_day, train_store = _rows(layout.train_present(calendar), 0)
    test_mask = np.zeros((calendar.num_days - calendar.num_train_days, stores.count), dtype=bool)
    test_mask[:, layout.test_store] = True
    test_day, test_store = _rows(test_mask, calendar.num_train_days)
    blank_open = layout.blank_open(calendar)[test_day - calendar.num_train_days, test_store]

    grids = DataGrids(calendar=calendar, trends=trends, weather=weather, train_day=train_day, train_store=train_store,
                      test_day=test_day, test_store=test_store, test_blank_open=blank_open, sales=sales,
                      customers=customers, is_open=is_open, promo=promo, holiday=holiday, school=school,
                      sales_model=SalesModel(expected=expected,
                                             weather_factor=weather_factor(weather, config.weather_scale),
                                             relative_trend_by_week=relative_trend_by_week,
                                             trend_columns=trend_columns, state_of_store=state_of_store,
                                             trend_scale=config.trend_scale, shift_factor=shift_factor))
    rendered = {
        "train.csv": files.train_csv(grids, train_day, train_store),
        "test.csv": files.test_csv(grids, test_day, test_store, blank_open),
        "store.csv": files.store_csv(stores),
        "store_states.csv": files.store_states_csv(stores),
        "state_names.csv": files.state_names_csv(),
        "googletrend.csv": files.googletrend_csv(trends),
        "weather.csv": files.weather_csv(calendar, weather),
    }
    row_counts = {name: data.count(b"\n") - 1 for name, data in rendered.items()}

    # The test rows are the horizon of the last train day: their expected sales as known on that day.
    horizon, known_on_train_end = point_in_time_expected(grids, TRAIN_END)
    test_known = known_on_train_end[test_day - horizon[0], test_store]
    day = np.concatenate([train_day, test_day])
    store = np.concatenate([train_store, test_store])
    per_row = {
        "Split": np.array(["train"] * len(train_day) + ["test"] * len(test_day), dtype=object),
        "Id": np.concatenate([np.zeros(len(train_day), dtype=np.int64), np.arange(1, len(test_day) + 1)]),
        "Store": store + 1,
        "Date": calendar.dates[day],
        "Open": is_open[day, store].astype(np.int8),
        "Sales": sales[day, store],
        "ExpectedSales": expected[day, store],
        "PointInTimeExpectedSales": np.concatenate([np.full(len(train_day), np.nan), test_known]),
    }
    truth = build_truth(config, calendar, row_counts, per_row, len(train_day), shifts)
    log.info("generated %d stores: %s", stores.count, ", ".join(f"{k} {v:,} rows" for k, v in row_counts.items()))
    return SynthDataset(files=rendered, truth=truth, expected_parquet=expected_values_parquet(per_row), grids=grids)


def build_truth(config: SynthConfig, calendar, row_counts: dict, per_row: dict, num_train_rows: int,
                shifts: LevelShifts | None = None) -> dict:
    """Noise floors computed from the integers written to the files, plus what a consumer needs to check them."""
    train = slice(0, num_train_rows)
    test = slice(num_train_rows, None)
    val_first, val_last = validation_window(TEST_START, TEST_END)
    dates = per_row["Date"][train]
    in_validation = (dates >= np.datetime64(val_first)) & (dates <= np.datetime64(val_last))
    sales, expected = per_row["Sales"], per_row["ExpectedSales"]
    train_sales, train_expected = sales[train], expected[train]
    open_train = per_row["Open"][train] == 1
    return {
        "generator": "rossmann_jobs.synth",
        "seed": config.seed,
        "sigma": config.sigma,
        "stores": config.stores,
        **_settings(config, calendar, shifts),
        "row_counts": row_counts,
        "windows": {
            "train": [TRAIN_START.isoformat(), TRAIN_END.isoformat()],
            "test": [TEST_START.isoformat(), TEST_END.isoformat()],
            "validation": [val_first.isoformat(), val_last.isoformat()],
            "validation_rule": "Date > min(test Date) - 365 days and Date <= max(test Date) - 365 days",
        },
        "noise_floor": {
            "metric": "exp_rmspe = sqrt(mean(((y - y_hat) / y)^2)) over rows with y = Sales > 0; "
                      "y_hat = ExpectedSales, the noise-free expected sales (oracle)",
            "train": floor_entry(train_sales, train_expected),
            "validation": floor_entry(train_sales[in_validation], train_expected[in_validation]),
            "test": floor_entry(sales[test], expected[test]),
            "test_point_in_time": {
                **floor_entry(sales[test], per_row["PointInTimeExpectedSales"][test]),
                "as_of": TRAIN_END.isoformat(),
                "note": "y_hat = PointInTimeExpectedSales: the expected sales with the weather and trend after "
                        "as_of replaced by what is known on as_of (synth/point_in_time_floor.py); the floor of a "
                        "forecast made on as_of",
            },
            "theoretical": theoretical_floor(config.sigma),
            "theoretical_best_scaled": best_scaled_floor(config.sigma),
            "theoretical_best_scaled_note": "lowest expected exp_rmspe of any y_hat = c * ExpectedSales "
                                            "(c = exp(-1.5 sigma^2)); the oracle floors above use c = 1",
        },
        "sales": {
            "mean_all_train_rows": float(train_sales.mean()),
            "mean_open_train_rows": float(train_sales[open_train].mean()) if open_train.any() else None,
            "max": int(train_sales.max()),
            "open_share": float(open_train.mean()),
        },
        "expected_values_columns": ["Split", "Id", "Store", "Date", "Open", "Sales", "ExpectedSales",
                                    "PointInTimeExpectedSales"],
    }
