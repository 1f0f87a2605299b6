"""Tests of the synthetic generator's knobs and named scenarios: growth, level shifts, weather and trend strength."""
from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import math

import numpy as np
import pandas as pd
import pytest

from rossmann_jobs.synth import cli
from rossmann_jobs.synth.dataset import SynthConfig, build_dataset
from rossmann_jobs.synth.dataset_calendar import TRAIN_END
from rossmann_jobs.synth.point_in_time_floor import point_in_time_expected
from rossmann_jobs.synth.sales import trend_factor, weather_factor
from rossmann_jobs.synth.scenarios import SCENARIO_NAMES, SCENARIOS, scenario_config
from rossmann_jobs.synth.shifts import SHIFT_WINDOW_DAYS

STORES, SEED = 40, 7
UNCHANGED_BY_SHIFTS = ("test.csv", "store.csv", "store_states.csv", "state_names.csv", "googletrend.csv",
                       "weather.csv")


def build(**knobs):
    return build_dataset(SynthConfig(stores=STORES, seed=SEED, **knobs))


@pytest.fixture(scope="module")
def base():
    return build()


@pytest.fixture(scope="module")
def shifted():
    return build(shift_share=0.3, shift_size=0.2)


def expected_rows(dataset) -> pd.DataFrame:
    return pd.read_parquet(io.BytesIO(dataset.expected_parquet))


def open_cells(dataset) -> np.ndarray:
    return dataset.grids.is_open & (dataset.grids.sales_model.expected > 0)


# --- defaults --------------------------------------------------------------------------------------------------

def test_default_knobs_are_byte_identical_to_explicit_defaults_and_the_baseline_scenario(base):
    explicit = build(growth_scale=1.0, shift_share=0.0, shift_size=0.15, weather_scale=1.0, trend_scale=1.0)
    baseline = build_dataset(scenario_config("baseline", STORES, SEED))
    for other in (explicit, baseline):
        assert other.files == base.files
        assert other.truth == base.truth
        assert other.expected_parquet == base.expected_parquet
    assert "settings" not in base.truth and "level_shifts" not in base.truth


# --- growth ----------------------------------------------------------------------------------------------------

def log_growth_spread(dataset) -> float:
    """Standard deviation over stores of log(mean expected sales Jan-Jul 2015 / Jan-Jul 2013), open train rows."""
    rows = expected_rows(dataset)
    rows = rows[(rows.Split == "train") & (rows.Open == 1) & (rows.ExpectedSales > 0)]
    month, year = pd.to_datetime(rows.Date).dt.month, pd.to_datetime(rows.Date).dt.year
    same_season = rows[month <= 7].assign(Year=year[month <= 7])
    means = same_season[same_season.Year.isin([2013, 2015])].groupby(["Store", "Year"]).ExpectedSales.mean()
    by_store = means.unstack("Year").dropna()
    assert len(by_store) >= STORES - 2
    return float(np.log(by_store[2015] / by_store[2013]).std())


def test_growth_scale_widens_the_spread_of_store_growth(base):
    faster = build(growth_scale=3.0)
    assert log_growth_spread(faster) > 2.0 * log_growth_spread(base)
    # Only the growth moved: the files whose content does not depend on sales are unchanged.
    assert faster.files["weather.csv"] == base.files["weather.csv"]
    assert faster.files["store.csv"] == base.files["store.csv"]


# --- level shifts ----------------------------------------------------------------------------------------------

def measured_shifts(base, shifted) -> dict[int, tuple[int, float]]:
    """store index -> (first day, log size) of each step in expected sales of shifted vs unshifted data set."""
    cells = open_cells(base)
    assert (cells == open_cells(shifted)).all()
    log_ratio = np.where(cells, np.log(np.where(cells, shifted.grids.sales_model.expected, 1.0)
                                       / np.where(cells, base.grids.sales_model.expected, 1.0)), np.nan)
    steps = {}
    for store in range(log_ratio.shape[1]):
        moved = np.flatnonzero(np.abs(np.nan_to_num(log_ratio[:, store])) > 1e-9)
        if len(moved):
            first, size = moved[0], log_ratio[moved[0], store]
            after = log_ratio[first:, store]
            # A permanent step: the same factor on every open day from the shift on, horizon included.
            np.testing.assert_allclose(after[~np.isnan(after)], size, rtol=1e-9)
            steps[store] = (int(first), float(size))
    return steps


def test_shift_share_shifts_that_share_of_stores_materially_and_late(base, shifted):
    steps = measured_shifts(base, shifted)
    num_train_days = base.grids.calendar.num_train_days
    assert len(steps) == round(0.3 * STORES)
    for first, size in steps.values():
        assert 0.2 / 3 - 1e-9 <= abs(size) <= 0.2 + 1e-9
        assert num_train_days - SHIFT_WINDOW_DAYS <= first
    assert {size > 0 for _, size in steps.values()} == {True, False}
    dates = base.grids.calendar.dates
    recorded = {entry["Store"] - 1: entry for entry in shifted.truth["level_shifts"]}
    assert set(recorded) == set(steps)
    for store, (first, size) in steps.items():
        assert recorded[store]["log_size"] == pytest.approx(size, rel=1e-9)
        shift_day = int(np.searchsorted(dates, np.datetime64(recorded[store]["Date"])))
        assert num_train_days - SHIFT_WINDOW_DAYS <= shift_day < num_train_days
        # The first open day at or after the shift day is the first with the new level.
        open_from_shift = np.flatnonzero(open_cells(base)[shift_day:, store])
        assert first == shift_day + open_from_shift[0]
    assert shifted.truth["settings"]["shift_share"] == 0.3


def test_shifts_come_from_their_own_stream(base, shifted):
    for name in UNCHANGED_BY_SHIFTS:
        assert shifted.files[name] == base.files[name], name
    assert shifted.files["train.csv"] != base.files["train.csv"]


def test_point_in_time_floor_keeps_shifts_known_on_the_origin(base, shifted):
    steps = measured_shifts(base, shifted)
    rows, base_rows = expected_rows(shifted), expected_rows(base)
    test = (rows.Split == "test") & rows.PointInTimeExpectedSales.notna() & (rows.PointInTimeExpectedSales > 0)
    ratio = rows.PointInTimeExpectedSales[test] / base_rows.PointInTimeExpectedSales[test]
    factor = rows.Store[test].map(lambda store: math.exp(steps.get(store - 1, (0, 0.0))[1]))
    assert test.sum() > 0 and rows.Store[test].sub(1).isin(list(steps)).any()
    np.testing.assert_allclose(ratio, factor, rtol=1e-9)   # every shift is dated <= TRAIN_END: known there

    # On an earlier origin a later shift is not known yet: the horizon keeps the store's level of that day.
    as_of = dt.date(2015, 6, 15)
    as_of_index = int(np.searchsorted(base.grids.calendar.dates, np.datetime64(as_of)))
    days, known = point_in_time_expected(shifted.grids, as_of)
    _days, base_known = point_in_time_expected(base.grids, as_of)
    shift_dates = {entry["Store"] - 1: dt.date.fromisoformat(entry["Date"]) for entry in shifted.truth["level_shifts"]}
    before = [store for store, date in shift_dates.items() if date <= as_of]
    after = [store for store, date in shift_dates.items() if date > as_of]
    assert before and after
    open_ = base_known > 0
    for store in before:
        np.testing.assert_allclose((known / np.where(open_, base_known, 1))[open_[:, store], store],
                                   math.exp(steps[store][1]), rtol=1e-9)
    for store in after:
        np.testing.assert_allclose(known[open_[:, store], store], base_known[open_[:, store], store], rtol=1e-9)
    assert days[0] == as_of_index + 1


# --- weather and trend strength --------------------------------------------------------------------------------

def per_store(grids, factor_by_state: np.ndarray) -> np.ndarray:
    return factor_by_state[:, grids.sales_model.state_of_store]


def test_weather_scale_zero_removes_the_weather_effect_and_nothing_else(base):
    calm = build(weather_scale=0.0)
    assert (calm.grids.sales_model.weather_factor == 1.0).all()
    cells = open_cells(base)
    full_weather = per_store(base.grids, weather_factor(base.grids.weather))
    assert np.abs(np.log(full_weather[cells])).max() > 0.02   # the default data set has a weather effect
    np.testing.assert_allclose(calm.grids.sales_model.expected[cells] * full_weather[cells],
                               base.grids.sales_model.expected[cells], rtol=1e-12)
    assert calm.files["weather.csv"] == base.files["weather.csv"]   # same weather, no effect


def test_weather_scale_scales_the_log_effect_and_the_point_in_time_climatology(base):
    strong = build(weather_scale=2.5)
    unscaled = weather_factor(base.grids.weather)
    np.testing.assert_allclose(strong.grids.sales_model.weather_factor, unscaled ** 2.5, rtol=1e-12)
    cells = open_cells(base)
    np.testing.assert_allclose(strong.grids.sales_model.expected[cells],
                               base.grids.sales_model.expected[cells] * per_store(base.grids, unscaled ** 1.5)[cells],
                               rtol=1e-12)
    # A stronger effect of unknowable weather makes the point-in-time floor worse.
    floor = strong.truth["noise_floor"]["test_point_in_time"]["exp_rmspe"]
    assert floor > base.truth["noise_floor"]["test_point_in_time"]["exp_rmspe"]


def test_trend_scale_zero_removes_the_trend_effect(base):
    flat = build(trend_scale=0.0)
    model = base.grids.sales_model
    joined = model.relative_trend_by_week[base.grids.trends.day_to_week]
    full_trend = trend_factor(joined[:, model.trend_columns], joined[:, 0])
    assert np.abs(np.log(full_trend)).max() > 0.02
    assert (trend_factor(joined[:, model.trend_columns], joined[:, 0], 0.0) == 1.0).all()
    cells = open_cells(base)
    np.testing.assert_allclose(flat.grids.sales_model.expected[cells] * full_trend[cells], model.expected[cells],
                               rtol=1e-12)
    assert flat.grids.sales_model.trend_scale == 0.0


def test_without_weather_and_trend_effects_the_point_in_time_expectation_is_the_oracle():
    dataset = build_dataset(scenario_config("no-weather-trend", STORES, SEED))
    rows = expected_rows(dataset)
    test = rows[rows.Split == "test"].dropna(subset=["PointInTimeExpectedSales"])
    np.testing.assert_allclose(test.PointInTimeExpectedSales, test.ExpectedSales, rtol=1e-12)
    days, known = point_in_time_expected(dataset.grids, dt.date(2015, 5, 20))
    np.testing.assert_allclose(known, dataset.grids.sales_model.expected[days], rtol=1e-12)


# --- scenarios, validation, CLI --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_every_scenario_generates_and_records_its_settings(name):
    config = scenario_config(name, 30, 3)
    overrides = SCENARIOS[name].overrides
    assert all(getattr(config, key) == value for key, value in overrides.items())
    dataset = build_dataset(config)
    assert all(data.count(b"\n") > 1 for data in dataset.files.values())
    knob_overrides = {key: value for key, value in overrides.items() if key != "sigma"}
    assert ("settings" in dataset.truth) == bool(knob_overrides)
    for key, value in knob_overrides.items():
        assert dataset.truth["settings"][key] == value
    assert math.isfinite(dataset.truth["noise_floor"]["test_point_in_time"]["exp_rmspe"])
    json.dumps(dataset.truth)   # JSON-ready


def test_scenario_set_covers_the_matrix():
    assert len(SCENARIOS) >= 7 and "baseline" in SCENARIOS and SCENARIOS["baseline"].overrides == {}
    assert all(scenario.description for scenario in SCENARIOS.values())


def test_unknown_scenario_is_a_clear_value_error():
    with pytest.raises(ValueError, match="unknown scenario 'nope'; known: baseline"):
        scenario_config("nope", 10, 1)


@pytest.mark.parametrize("knobs, message", [
    ({"growth_scale": -1.0}, "--growth-scale .* must be within 0 .. 10, got -1.0"),
    ({"shift_share": 1.5}, "--shift-share .* must be within 0 .. 1, got 1.5"),
    ({"shift_size": 0.0}, "--shift-size .* must be above 0 and at most 1, got 0.0"),
    ({"weather_scale": float("nan")}, "--weather-scale .* got nan"),
    ({"trend_scale": 6.0}, "--trend-scale .* must be within 0 .. 5, got 6.0"),
])
def test_invalid_knob_values_are_refused(knobs, message):
    with pytest.raises(ValueError, match=message):
        build_dataset(dataclasses.replace(SynthConfig(stores=3, seed=1), **knobs))


def test_cli_scenario_with_overriding_flags(tmp_path):
    out = tmp_path / "raw"
    assert cli.main(["generate", "--out", str(out), "--stores", "5", "--seed", "2", "--scenario", "mixed",
                     "--sigma", "0.05", "--growth-scale", "4"]) == 0
    truth = json.loads((tmp_path / "raw.truth.json").read_text())
    assert truth["sigma"] == 0.05
    assert truth["settings"] == {"growth_scale": 4.0, "shift_share": 0.15, "shift_size": 0.15,
                                 "weather_scale": 1.0, "trend_scale": 1.5}
    expected = build_dataset(SynthConfig(stores=5, seed=2, sigma=0.05, growth_scale=4.0, shift_share=0.15,
                                         trend_scale=1.5))
    assert (out / "train.csv").read_bytes() == expected.files["train.csv"]


def test_cli_land_takes_the_knobs(tmp_path):
    out = tmp_path / "landing"
    day = TRAIN_END.isoformat()
    assert cli.main(["land", "--out", str(out), "--from-date", day, "--to-date", day, "--stores", "5",
                     "--scenario", "shifts", "--shift-size", "0.3"]) == 0
    truth = json.loads((tmp_path / "landing.truth.json").read_text())
    assert truth["settings"]["shift_share"] == 0.3 and truth["settings"]["shift_size"] == 0.3
    expected = build_dataset(SynthConfig(stores=5, seed=42, shift_share=0.3, shift_size=0.3))
    assert (out / day / "train.csv").read_bytes() == expected.files["train.csv"]


def test_cli_refuses_unknown_scenario_and_bad_values(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["generate", "--out", str(tmp_path / "a"), "--stores", "3", "--scenario", "nope"])
    assert exited.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["generate", "--out", str(tmp_path / "b"), "--stores", "3", "--weather-scale", "-1"])
    assert exited.value.code == 2 and "--weather-scale" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
