"""The generator's point-in-time floor: what is known on D, insensitive to the future, recorded in the truth."""
from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pytest

from rossmann_jobs.metrics import exp_rmspe
from rossmann_jobs.synth.dataset import SynthConfig, build_dataset
from rossmann_jobs.synth.dataset_calendar import HORIZON_DAYS, TRAIN_END
from rossmann_jobs.synth.point_in_time_floor import point_in_time_expected
from rossmann_jobs.synth.sales import trend_factor

AS_OF = dt.date(2015, 3, 10)


@pytest.fixture(scope="module")
def dataset():
    return build_dataset(SynthConfig(stores=40, seed=11))


def with_other_future(grids, as_of: dt.date, rng: np.random.Generator):
    """The same data set with every weather factor and trend week after as_of redrawn, and the expected sales of
    those days following them, as a different future would make them."""
    model = grids.sales_model
    after = grids.calendar.dates > np.datetime64(as_of)
    weather = model.weather_factor.copy()
    weather[after] *= rng.uniform(0.8, 1.1, weather[after].shape)
    week_ends = np.array([np.datetime64(start + dt.timedelta(days=6)) for start in grids.trends.week_start])
    relative = model.relative_trend_by_week.copy()
    later = week_ends > np.datetime64(as_of)
    relative[later] *= rng.uniform(0.5, 1.5, relative[later].shape)

    def trend(rel):
        joined = rel[grids.trends.day_to_week]
        return trend_factor(joined[:, model.trend_columns], joined[:, 0])

    expected = (model.expected * (weather / model.weather_factor)[:, model.state_of_store]
                * trend(relative) / trend(model.relative_trend_by_week))
    assert not np.allclose(expected[after], model.expected[after])   # the future really is different
    other = dataclasses.replace(model, expected=expected, weather_factor=weather, relative_trend_by_week=relative)
    return dataclasses.replace(grids, sales_model=other)


def test_point_in_time_expected_does_not_depend_on_the_future(dataset):
    days, known = point_in_time_expected(dataset.grids, AS_OF)
    assert len(days) == HORIZON_DAYS and dataset.grids.calendar.dates[days[0]] == np.datetime64(AS_OF) + 1
    other_days, other_known = point_in_time_expected(with_other_future(dataset.grids, AS_OF,
                                                                       np.random.default_rng(3)), AS_OF)
    assert (other_days == days).all()
    np.testing.assert_allclose(other_known, known, rtol=1e-12)
    # ... while the oracle's expected sales of those days changed with it.
    model = dataset.grids.sales_model
    is_open = model.expected[days] > 0
    assert ((known > 0) == is_open).all()
    assert not np.allclose(known[is_open], model.expected[days][is_open], rtol=1e-3)


def test_point_in_time_floor_is_above_the_noise_floor_and_in_the_truth(dataset):
    floors = dataset.truth["noise_floor"]
    entry = floors["test_point_in_time"]
    assert entry["as_of"] == TRAIN_END.isoformat() and entry["rows"] == floors["test"]["rows"]
    # Not knowing the horizon's weather and trend costs accuracy, but far less than the noise itself.
    assert floors["test"]["exp_rmspe"] < entry["exp_rmspe"] < 1.5 * floors["test"]["exp_rmspe"]
    grids = dataset.grids
    days, known = point_in_time_expected(grids, TRAIN_END)
    rows = known[grids.test_day - days[0], grids.test_store]
    sales = grids.sales[grids.test_day, grids.test_store]
    assert entry["exp_rmspe"] == pytest.approx(exp_rmspe(sales, rows), rel=1e-12)


@pytest.mark.parametrize("as_of", [dt.date(2014, 10, 31), dt.date(2014, 11, 30), dt.date(2014, 12, 31)])
def test_the_trend_known_on_d_is_moved_through_christmas_by_its_season(dataset, as_of):
    """Around Christmas the trend's own season moves sales by more than a tenth: the floor carries the last known
    week into and out of the peak (persisting it put the horizon's sales 7-9 % low before Christmas and 12-18 % high
    after it), so only the random walks the date cannot tell are left, and the expectation stays near the oracle's."""
    days, known = point_in_time_expected(dataset.grids, as_of)
    expected = dataset.grids.sales_model.expected[days]
    is_open = expected > 0
    assert np.median(known[is_open] / expected[is_open]) == pytest.approx(1.0, abs=0.05)


def test_point_in_time_expected_refuses_dates_outside_the_calendar(dataset):
    with pytest.raises(ValueError, match="outside the generated calendar"):
        point_in_time_expected(dataset.grids, dt.date(2012, 1, 1))
