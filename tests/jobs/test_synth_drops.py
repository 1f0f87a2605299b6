"""Tests of `synth land`'s daily drops: each drop holds only what is known on its date, plus the next 48 days' plan."""
from __future__ import annotations

import datetime as dt
import functools
import io
import json
import os

import pandas as pd
import pytest

from rossmann_jobs import storage
from rossmann_jobs.features.drop_manifest import manifest_bytes
from rossmann_jobs.synth import HORIZON_DAYS, RAW_FILES, DailyDrops, cli
from rossmann_jobs.synth.dataset import SynthConfig, build_dataset

CONFIG = SynthConfig(stores=8, seed=5)   # 8 stores: at least one 2014-H2 gap store and one store without test rows
LAST_TRAIN_DAY = dt.date(2015, 7, 31)
DROP_DATES = [
    dt.date(2013, 1, 1),    # the first train day: a single day of sales, the plan entirely in the train period
    dt.date(2014, 8, 16),   # a Saturday inside the 2014-H2 gap of some stores
    dt.date(2014, 8, 17),   # a Sunday, the day after
    dt.date(2015, 6, 30),   # the horizon straddles the end of train.csv: plan from train and test rows
    LAST_TRAIN_DAY,         # the Kaggle setting: the plan is the Kaggle test period
]
PLAN_COLUMNS = ["Store", "DayOfWeek", "Date", "Open", "Promo", "StateHoliday", "SchoolHoliday"]


@pytest.fixture(scope="module")
def dataset():
    return build_dataset(CONFIG)


@pytest.fixture(scope="module")
def drop_on(dataset):
    """day -> the drop's files, cut from the one data set (cached: several tests read the same drops)."""
    drops = DailyDrops(dataset)
    return functools.lru_cache(maxsize=None)(drops.files_on)


def lines(data: bytes) -> list[str]:
    return data.decode("utf-8").splitlines()


def rows_dated_until(data: bytes, date_field: int, day: dt.date) -> list[str]:
    """The header and the lines of a full file whose Date (the unquoted field `date_field`) is <= day."""
    header, *rows = lines(data)
    return [header] + [row for row in rows if row.split(",")[date_field] <= day.isoformat()]


def frame(data: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)


def horizon_dates(day: dt.date) -> list[str]:
    return [d.strftime("%Y-%m-%d") for d in pd.date_range(day + dt.timedelta(days=1), periods=48, freq="D")]


def test_horizon_is_the_kaggle_test_period_length():
    assert HORIZON_DAYS == 48


def test_drop_dates_cover_a_saturday_and_a_sunday_in_the_gap():
    assert [d.isoweekday() for d in DROP_DATES[1:3]] == [6, 7]


@pytest.mark.parametrize("day", DROP_DATES, ids=str)
def test_train_csv_is_the_full_files_rows_dated_until_the_drop_date(dataset, drop_on, day):
    drop_lines = lines(drop_on(day)["train.csv"])
    assert drop_lines == rows_dated_until(dataset.files["train.csv"], 2, day)
    dates = frame(drop_on(day)["train.csv"]).Date
    assert dates.max() == day.isoformat() and dates.min() == "2013-01-01"


def test_gap_store_is_absent_from_a_drop_inside_its_gap(drop_on):
    before = frame(drop_on(dt.date(2014, 6, 30))["train.csv"])
    inside = frame(drop_on(dt.date(2014, 8, 16))["train.csv"])
    gap_stores = set(before[before.Date == "2014-06-30"].Store) - set(inside[inside.Date == "2014-08-16"].Store)
    assert gap_stores, "the 8-store data set has a 2014-H2 gap store"
    assert not inside[inside.Store.isin(gap_stores) & (inside.Date >= "2014-07-01")].shape[0]


@pytest.mark.parametrize("day", DROP_DATES, ids=str)
def test_weather_csv_holds_the_days_until_the_drop_date(dataset, drop_on, day):
    assert lines(drop_on(day)["weather.csv"]) == rows_dated_until(dataset.files["weather.csv"], 1, day)
    weather = frame(drop_on(day)["weather.csv"])
    assert weather.Date.max() == day.isoformat() and weather.file.nunique() == 16


@pytest.mark.parametrize("day", DROP_DATES, ids=str)
def test_googletrend_csv_holds_the_weeks_ended_by_the_drop_date(dataset, drop_on, day):
    trend = frame(drop_on(day)["googletrend.csv"])
    week_end = pd.to_datetime(trend.week.str.slice(13))
    last_saturday = pd.Timestamp(day - dt.timedelta(days=(day.isoweekday() + 1) % 7))
    assert last_saturday.dayofweek == 5
    assert week_end.max() == last_saturday
    full = frame(dataset.files["googletrend.csv"])
    expected = full[pd.to_datetime(full.week.str.slice(13)) <= pd.Timestamp(day)].reset_index(drop=True)
    pd.testing.assert_frame_equal(trend, expected)
    assert lines(drop_on(day)["googletrend.csv"])[1] == lines(dataset.files["googletrend.csv"])[1]  # quoting kept


@pytest.mark.parametrize("day", DROP_DATES, ids=str)
def test_test_csv_is_the_plan_of_the_next_48_days(dataset, drop_on, day):
    plan = frame(drop_on(day)["test.csv"])
    assert lines(drop_on(day)["test.csv"])[0] == lines(dataset.files["test.csv"])[0]
    assert sorted(set(plan.Date)) == horizon_dates(day)
    assert plan.Id.tolist() == [str(i) for i in range(1, len(plan) + 1)]

    # The plan for a day: the (Store, day) rows the full data set has that day (train rows, then test rows after
    # the train period), with their Open/Promo/StateHoliday/SchoolHoliday; Date descending, Store ascending.
    known = pd.concat([frame(dataset.files[name])[PLAN_COLUMNS] for name in ("train.csv", "test.csv")])
    expected = known[known.Date.isin(horizon_dates(day))].copy()
    expected["StoreNumber"] = expected.Store.astype(int)
    expected = expected.sort_values(["Date", "StoreNumber"], ascending=[False, True])[PLAN_COLUMNS]
    pd.testing.assert_frame_equal(plan[PLAN_COLUMNS], expected.reset_index(drop=True))


def test_last_train_day_drop_plan_is_the_kaggle_test_csv_byte_for_byte(dataset, drop_on):
    drop = drop_on(LAST_TRAIN_DAY)
    assert drop["test.csv"] == dataset.files["test.csv"]
    assert drop["train.csv"] == dataset.files["train.csv"]
    assert b",," in drop["test.csv"]   # the blank-Open quirk survives


@pytest.mark.parametrize("day", DROP_DATES, ids=str)
def test_static_files_are_unchanged(dataset, drop_on, day):
    drop = drop_on(day)
    assert list(drop) == list(RAW_FILES)
    for name in ("store.csv", "store_states.csv", "state_names.csv"):
        assert drop[name] == dataset.files[name], name


@pytest.mark.parametrize("day", [dt.date(2013, 1, 1), dt.date(2014, 8, 16), dt.date(2014, 12, 31),
                                 dt.date(2015, 7, 30)], ids=str)
def test_next_days_drop_extends_this_days_drop(drop_on, day):
    today, tomorrow = drop_on(day), drop_on(day + dt.timedelta(days=1))
    for name in ("train.csv", "weather.csv", "googletrend.csv"):
        assert set(lines(today[name])) <= set(lines(tomorrow[name])), name
    # train.csv is Date descending: tomorrow's file is today's with tomorrow's rows inserted after the header.
    assert tomorrow["train.csv"].endswith(today["train.csv"].split(b"\n", 1)[1])
    assert len(lines(tomorrow["train.csv"])) > len(lines(today["train.csv"]))


@pytest.mark.parametrize("day", [dt.date(2012, 12, 31), dt.date(2015, 8, 1), dt.date(2015, 9, 17)], ids=str)
def test_dates_outside_the_train_period_are_refused(drop_on, tmp_path, day):
    with pytest.raises(ValueError, match="outside 2013-01-01 .. 2015-07-31"):
        drop_on(day)
    from_date, to_date = sorted([day, LAST_TRAIN_DAY])
    with pytest.raises(ValueError, match="outside 2013-01-01 .. 2015-07-31"):
        cli.land(str(tmp_path / "landing"), from_date, to_date, CONFIG)
    assert os.listdir(tmp_path) == []   # refused before anything was written


def test_cli_refuses_an_out_of_range_date_with_a_usage_error(tmp_path, capsys):
    argv = ["land", "--out", str(tmp_path / "landing"), "--from-date", "2015-07-31", "--to-date", "2015-08-01",
            "--stores", "2"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert "drop date 2015-08-01 is outside 2013-01-01 .. 2015-07-31" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_cli_full_snapshot_lands_what_generate_writes_for_any_date(tmp_path, dataset):
    cli.generate(str(tmp_path / "raw"), CONFIG)
    assert cli.main(["land", "--out", str(tmp_path / "landing"), "--from-date", "2015-08-01", "--to-date",
                     "2015-08-01", "--stores", str(CONFIG.stores), "--seed", str(CONFIG.seed), "--full-snapshot"]) == 0
    drop = tmp_path / "landing" / "2015-08-01"
    assert sorted(os.listdir(drop)) == sorted([*RAW_FILES, "_SUCCESS"])
    for name in RAW_FILES:
        assert (drop / name).read_bytes() == (tmp_path / "raw" / name).read_bytes(), name
    landed_truth = json.loads((tmp_path / "landing.truth.json").read_text())
    generated_truth = json.loads((tmp_path / "raw.truth.json").read_text())
    assert landed_truth.pop("expected_values") == "landing.truth.expected.parquet"
    assert generated_truth.pop("expected_values") == "raw.truth.expected.parquet"
    assert landed_truth == generated_truth
    assert ((tmp_path / "landing.truth.expected.parquet").read_bytes()
            == (tmp_path / "raw.truth.expected.parquet").read_bytes())


def test_land_writes_daily_drops_marker_last_and_is_idempotent(s3_bucket, monkeypatch, dataset):
    writes: list[str] = []
    real_write = storage.write_bytes

    def recording_write(uri: str, data: bytes) -> None:
        writes.append(uri)
        real_write(uri, data)

    monkeypatch.setattr(storage, "write_bytes", recording_write)
    out = f"{s3_bucket}/landing"
    landed = cli.land(out, dt.date(2015, 7, 29), dt.date(2015, 7, 30), CONFIG)
    assert landed == [f"{out}/2015-07-29", f"{out}/2015-07-30"]
    drops = DailyDrops(dataset)
    for drop in landed:
        drop_writes = [w for w in writes if w.startswith(drop + "/")]
        assert sorted(w.rsplit("/", 1)[1] for w in drop_writes) == sorted([*RAW_FILES, "_SUCCESS"])
        assert drop_writes[-1] == f"{drop}/_SUCCESS"
        expected = drops.files_on(dt.date.fromisoformat(drop.rsplit("/", 1)[1]))
        # The marker is the manifest of exactly what was written.
        assert storage.read_bytes(f"{drop}/_SUCCESS") == manifest_bytes({name: expected[name] for name in RAW_FILES})
        assert all(storage.read_bytes(f"{drop}/{name}") == expected[name] for name in RAW_FILES)
    assert storage.exists(f"{out}.truth.json")   # beside the landing folder; each drop holds just its 8 objects

    writes.clear()
    assert cli.land(out, dt.date(2015, 7, 29), dt.date(2015, 7, 30), CONFIG) == []
    assert writes == []

    # An interrupted drop (files but no marker, a file damaged) is rewritten and then marked.
    storage.write_bytes(f"{out}/2015-07-31/train.csv", b"partial")
    assert cli.land(out, dt.date(2015, 7, 29), dt.date(2015, 7, 31), CONFIG) == [f"{out}/2015-07-31"]
    assert storage.read_bytes(f"{out}/2015-07-31/train.csv") == dataset.files["train.csv"]
    assert storage.exists(f"{out}/2015-07-31/_SUCCESS")


def test_land_rejects_reversed_dates(tmp_path):
    with pytest.raises(ValueError, match="after --to-date"):
        cli.land(str(tmp_path / "l"), dt.date(2015, 7, 2), dt.date(2015, 7, 1), SynthConfig(stores=2))
