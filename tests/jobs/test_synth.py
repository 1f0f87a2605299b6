"""Tests of the synthetic Rossmann generator against the documented facts of the real files."""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from rossmann_jobs import storage
from rossmann_jobs.metrics import exp_rmspe
from rossmann_jobs.synth import cli
from rossmann_jobs.synth.dataset import SynthConfig, build_dataset
from rossmann_jobs.synth.dataset_calendar import days_since_event, days_until_event, easter_sunday
from rossmann_jobs.synth.stores import scaled_counts
from rossmann_jobs.synth.truth import theoretical_floor, validation_window

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Columns as listed in /work/shared/rossmann-data-facts.md.
EXPECTED_COLUMNS = {
    "train.csv": "Store,DayOfWeek,Date,Sales,Customers,Open,Promo,StateHoliday,SchoolHoliday",
    "test.csv": "Id,Store,DayOfWeek,Date,Open,Promo,StateHoliday,SchoolHoliday",
    "store.csv": "Store,StoreType,Assortment,CompetitionDistance,CompetitionOpenSinceMonth,CompetitionOpenSinceYear,"
                 "Promo2,Promo2SinceWeek,Promo2SinceYear,PromoInterval",
    "store_states.csv": "Store,State",
    "state_names.csv": "StateName,State",
    "googletrend.csv": "file,week,trend",
    "weather.csv": "file,Date,Max_TemperatureC,Mean_TemperatureC,Min_TemperatureC,Dew_PointC,MeanDew_PointC,"
                   "Min_DewpointC,Max_Humidity,Mean_Humidity,Min_Humidity,Max_Sea_Level_PressurehPa,"
                   "Mean_Sea_Level_PressurehPa,Min_Sea_Level_PressurehPa,Max_VisibilityKm,Mean_VisibilityKm,"
                   "Min_VisibilitykM,Max_Wind_SpeedKm_h,Mean_Wind_SpeedKm_h,Max_Gust_SpeedKm_h,Precipitationmm,"
                   "CloudCover,Events,WindDirDegrees",
}
STORE_STATE_CODES = {"BE", "BW", "BY", "HB,NI", "HE", "HH", "NW", "RP", "SH", "SN", "ST", "TH"}
STORES, SEED = 24, 11
REAL_STORES = 1115


def scaled(real_count: int, stores: int = STORES) -> int:
    return int(round(real_count * stores / REAL_STORES))


def days(first: str, last: str) -> pd.DatetimeIndex:
    return pd.date_range(first, last, freq="D")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A small data set written to a local folder; yields (raw folder, truth path)."""
    root = tmp_path_factory.mktemp("synth")
    out = str(root / "raw")
    cli.generate(out, SynthConfig(stores=STORES, seed=SEED))
    return out, out + ".truth.json"


@pytest.fixture(scope="module")
def frames(generated):
    out, _truth = generated
    read = {name: pd.read_csv(os.path.join(out, name), dtype=str, keep_default_na=False)
            for name in EXPECTED_COLUMNS}
    return read


def raw_lines(generated, name: str) -> list[str]:
    with open(os.path.join(generated[0], name), encoding="utf-8") as handle:
        return handle.read().splitlines()


def csv_rows(generated, name: str) -> list[dict]:
    with open(os.path.join(generated[0], name), newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


# --- unit tests of the pure building blocks ----------------------------------------------------------------------

def test_easter_sunday_known_dates():
    assert [easter_sunday(y) for y in (2013, 2014, 2015, 2016)] == [
        dt.date(2013, 3, 31), dt.date(2014, 4, 20), dt.date(2015, 4, 5), dt.date(2016, 3, 27)]


def test_days_since_and_until_event():
    events = np.array([False, True, False, False, True, False])
    assert days_since_event(events).tolist() == [10_000, 0, 1, 2, 0, 1]
    assert days_until_event(events).tolist() == [1, 0, 2, 1, 0, 10_000]


def test_scaled_counts_exact_at_full_scale_and_keep_every_category():
    assert scaled_counts([17, 602, 148, 348], 1115).tolist() == [17, 602, 148, 348]
    small = scaled_counts([17, 602, 148, 348], 10)
    assert small.sum() == 10 and (small >= 1).all()
    assert scaled_counts([5, 5, 5], 2).tolist() == [1, 1, 0]


def test_exp_rmspe_ignores_zero_actuals():
    assert exp_rmspe(np.array([100.0, 0.0, 200.0]), np.array([90.0, 50.0, 220.0])) == pytest.approx(0.1)


def test_theoretical_floor_matches_simulation():
    eps = np.random.default_rng(0).normal(0.0, 0.2, 2_000_000)
    simulated = np.sqrt(np.mean((1 - np.exp(-eps)) ** 2))
    assert theoretical_floor(0.2) == pytest.approx(simulated, rel=5e-3)
    assert theoretical_floor(0.0) == 0.0


def test_validation_window_follows_reference_rule():
    assert validation_window(dt.date(2015, 8, 1), dt.date(2015, 9, 17)) == (dt.date(2014, 8, 2), dt.date(2014, 9, 17))


# --- the written files --------------------------------------------------------------------------------------------

def test_seven_files_with_documented_columns(generated):
    out, truth = generated
    assert sorted(os.listdir(out)) == sorted(EXPECTED_COLUMNS)
    for name, header in EXPECTED_COLUMNS.items():
        assert raw_lines(generated, name)[0] == header, name
    assert os.path.exists(truth) and not truth.startswith(out + os.sep)


def test_train_rows_dates_order_gap_and_missing_day(frames):
    train = frames["train.csv"]
    dates = pd.to_datetime(train.Date)
    stores = train.Store.astype(int)
    assert dates.min() == pd.Timestamp("2013-01-01") and dates.max() == pd.Timestamp("2015-07-31")
    keys = pd.DataFrame({"neg_day": -dates.astype("int64"), "store": stores})
    assert keys.equals(keys.sort_values(["neg_day", "store"]).reset_index(drop=True)), "not Date desc, Store asc"
    assert not keys.duplicated().any()
    assert stores.nunique() == STORES

    per_store = train.groupby(stores).Date.agg(lambda d: set(d))
    all_days = {d.strftime("%Y-%m-%d") for d in days("2013-01-01", "2015-07-31")}
    gap = {d.strftime("%Y-%m-%d") for d in days("2014-07-01", "2014-12-31")}
    missing = {store: all_days - present for store, present in per_store.items()}
    gap_stores = [s for s, m in missing.items() if m == gap]
    one_day = [s for s, m in missing.items() if len(m) == 1]
    assert len(gap_stores) == scaled(180)
    assert len(one_day) == 1 and missing[one_day[0]] == {"2013-01-01"}
    assert all(not m for s, m in missing.items() if s not in gap_stores + one_day)
    assert len(train) == STORES * 942 - scaled(180) * 184 - 1


def test_day_of_week_closed_rows_and_sundays(frames):
    train = frames["train.csv"].astype({"Sales": int, "Customers": int, "Open": int, "DayOfWeek": int})
    assert (pd.to_datetime(train.Date).dt.dayofweek + 1).tolist() == train.DayOfWeek.tolist()
    closed = train[train.Open == 0]
    assert len(closed) > 0 and (closed.Sales == 0).all() and (closed.Customers == 0).all()
    opened = train[train.Open == 1]
    assert (opened.Sales > 0).mean() > 0.999 and opened.Sales.mean() > 3000

    store_types = frames["store.csv"].set_index("Store").StoreType
    sundays = train[train.DayOfWeek == 7]
    sunday_open = sundays.groupby("Store").Open.mean()
    assert sunday_open.mean() < 0.3, "stores should mostly close on Sundays"
    type_b = store_types[store_types == "b"].index
    assert len(type_b) >= 1 and (sunday_open[type_b] > 0.9).all(), "every StoreType b opens on Sundays"


def test_state_holiday_mixes_plain_and_quoted_zero_and_letters_on_holidays(generated, frames):
    fields = [line.split(",")[7] for line in raw_lines(generated, "train.csv")[1:]]
    assert {"0", '"0"', "a", "b", "c"} <= set(fields) <= {"0", '"0"', "a", "b", "c"}

    train = frames["train.csv"]
    states = frames["store_states.csv"].set_index("Store").State
    holiday = train.set_index(["Date", "Store"]).StateHoliday
    for day, letter in [("2014-10-03", "a"), ("2013-05-01", "a"), ("2014-04-18", "b"), ("2015-04-06", "b"),
                        ("2014-12-25", "c"), ("2013-12-26", "c")]:
        assert set(holiday.loc[day]) == {letter}, day
    epiphany = holiday.loc["2015-01-06"]
    expected = {store: "a" if states[store] in ("BW", "BY", "ST") else "0" for store in epiphany.index}
    assert epiphany.to_dict() == expected
    assert set(holiday.loc["2015-07-15"]) == {"0"}


def test_test_file_ids_stores_and_blank_open(generated, frames):
    test, train = frames["test.csv"], frames["train.csv"]
    assert test.Id.astype(int).tolist() == list(range(1, len(test) + 1))
    assert set(test.Date) == {d.strftime("%Y-%m-%d") for d in days("2015-08-01", "2015-09-17")}
    assert test.Store.nunique() == scaled(856)
    assert set(test.Store) <= set(train.Store)
    assert len(test) == scaled(856) * 48
    blank = test[test.Open == ""]
    assert len(blank) == 11 and blank.Store.nunique() == 1
    assert (pd.to_datetime(blank.Date).dt.dayofweek != 6).all()
    assert set(test.Open) == {"0", "1", ""}
    assert sum(line.split(",")[4] == "" for line in raw_lines(generated, "test.csv")[1:]) == 11


def test_store_csv_quirks(generated, frames):
    store = frames["store.csv"]
    assert store.Store.astype(int).tolist() == list(range(1, STORES + 1))
    assert set(store.StoreType) == {"a", "b", "c", "d"}
    assert set(store.Assortment) <= {"a", "b", "c"}
    no_promo2 = store[store.Promo2 == "0"]
    with_promo2 = store[store.Promo2 == "1"]
    assert len(no_promo2) > 0 and len(with_promo2) > 0
    assert (no_promo2[["Promo2SinceWeek", "Promo2SinceYear", "PromoInterval"]] == "").all().all()
    assert (with_promo2[["Promo2SinceWeek", "Promo2SinceYear", "PromoInterval"]] != "").all().all()
    assert set(with_promo2.PromoInterval) <= {"Jan,Apr,Jul,Oct", "Feb,May,Aug,Nov", "Mar,Jun,Sept,Dec"}
    for line in raw_lines(generated, "store.csv")[1:]:
        if line.split(",")[6] == "1":
            assert re.search(r',"(Jan,Apr,Jul,Oct|Feb,May,Aug,Nov|Mar,Jun,Sept,Dec)"$', line), line
        else:
            assert line.endswith(",0,,,"), line
    assert (store.CompetitionDistance == "").sum() >= 1
    since_blank = store.CompetitionOpenSinceYear == ""
    assert (since_blank == (store.CompetitionOpenSinceMonth == "")).all()
    assert since_blank.sum() == scaled(354)
    assert (store.CompetitionOpenSinceYear == "1900").sum() == 1


def test_states_quote_hb_ni(generated, frames):
    assert any(line.endswith(',"HB,NI"') for line in raw_lines(generated, "store_states.csv"))
    assert 'Niedersachsen,"HB,NI"' in raw_lines(generated, "state_names.csv")
    assert "NordrheinWestfalen,NW" in raw_lines(generated, "state_names.csv")
    names = frames["state_names.csv"]
    assert len(names) == 16 and names.State.is_unique
    assert set(frames["store_states.csv"].State) == STORE_STATE_CODES
    assert set(frames["store_states.csv"].State) <= set(names.State)
    rows = csv_rows(generated, "store_states.csv")
    assert {row["State"] for row in rows} == STORE_STATE_CODES


def test_googletrend_files_weeks_and_values(generated, frames):
    trend = frames["googletrend.csv"]
    codes = {"BE", "BW", "BY", "HE", "HH", "NI", "NW", "RP", "SH", "SL", "SN", "ST", "TH"}
    assert set(trend.file) == {"Rossmann_DE"} | {f"Rossmann_DE_{c}" for c in codes}
    assert (trend.groupby("file").week.nunique() == 148).all() and len(trend) == 14 * 148
    assert trend.week.iloc[0] == "2012-12-02 - 2012-12-08"
    assert '"2012-12-02 - 2012-12-08"' in raw_lines(generated, "googletrend.csv")[1]
    parts = trend.week.str.extract(r"^(\d{4}-\d{2}-\d{2}) - (\d{4}-\d{2}-\d{2})$")
    start, end = pd.to_datetime(parts[0]), pd.to_datetime(parts[1])
    assert (start.dt.dayofweek == 6).all() and ((end - start).dt.days == 6).all()
    assert start.min() <= pd.Timestamp("2013-01-01") and end.max() >= pd.Timestamp("2015-09-17")
    values = trend.trend.astype(int)
    assert values.between(0, 100).all() and (trend.trend == values.astype(str)).all()


def test_weather_rows_states_and_missing_rates(frames):
    weather = frames["weather.csv"]
    assert set(weather.file) == set(frames["state_names.csv"].StateName)
    assert len(weather) == 16 * 990 and not weather.duplicated(["file", "Date"]).any()
    assert set(weather.Date) == {d.strftime("%Y-%m-%d") for d in days("2013-01-01", "2015-09-17")}
    blank = (weather == "").mean()
    assert blank.Events == pytest.approx(0.25, abs=0.04)
    assert blank.CloudCover == pytest.approx(0.07, abs=0.02)
    assert blank.Max_Gust_SpeedKm_h == pytest.approx(0.77, abs=0.02)
    assert blank.Max_TemperatureC == 0 and blank.Mean_Humidity == 0
    events = set(weather.Events) - {""}
    assert {"Rain", "Snow"} <= events
    assert all(set(e.split("-")) <= {"Fog", "Rain", "Snow", "Hail", "Thunderstorm"} for e in events)
    assert pd.to_numeric(weather.Max_TemperatureC).ge(pd.to_numeric(weather.Min_TemperatureC)).all()


# --- truth ---------------------------------------------------------------------------------------------------------

def test_noise_floor_matches_independent_recomputation(generated, frames):
    out, truth_path = generated
    truth = json.loads(open(truth_path).read())
    expected = pd.read_parquet(os.path.join(os.path.dirname(truth_path), truth["expected_values"]))
    train = frames["train.csv"].astype({"Store": int, "Sales": int})
    train["Date"] = pd.to_datetime(train.Date)
    expected["Date"] = pd.to_datetime(expected.Date)
    joined = train.merge(expected[expected.Split == "train"], on=["Store", "Date"], suffixes=("", "_truth"),
                         validate="one_to_one")
    assert len(joined) == len(train) and (joined.Sales == joined.Sales_truth).all()

    def floor(rows: pd.DataFrame) -> float:
        rows = rows[rows.Sales > 0]
        return float(np.sqrt((((rows.Sales - rows.ExpectedSales) / rows.Sales) ** 2).mean()))

    test_dates = pd.to_datetime(frames["test.csv"].Date)
    first, last = test_dates.min() - pd.Timedelta(days=365), test_dates.max() - pd.Timedelta(days=365)
    validation = joined[(joined.Date > first) & (joined.Date <= last)]
    assert truth["noise_floor"]["train"]["exp_rmspe"] == pytest.approx(floor(joined), rel=1e-9)
    assert truth["noise_floor"]["validation"]["exp_rmspe"] == pytest.approx(floor(validation), rel=1e-9)
    assert truth["noise_floor"]["validation"]["rows"] == int((validation.Sales > 0).sum())
    assert truth["windows"]["validation"] == [(first + pd.Timedelta(days=1)).strftime("%Y-%m-%d"),
                                              last.strftime("%Y-%m-%d")]
    # sigma 0.1: the oracle's exp-RMSPE is sqrt(1 - 2e^0.005 + e^0.02) ~ 0.1009, up to sampling error.
    assert truth["sigma"] == 0.1
    assert truth["noise_floor"]["train"]["exp_rmspe"] == pytest.approx(0.1009, abs=0.004)
    assert truth["row_counts"]["train.csv"] == len(train)
    hidden = expected[expected.Split == "test"]
    assert hidden.Id.tolist() == frames["test.csv"].Id.astype(int).tolist()
    assert ((hidden.Open == 0) == (hidden.Sales == 0)).mean() > 0.999


def test_features_carry_signal_a_linear_model_can_learn(frames, generated):
    """log(Sales) ~ store + day of week + promo + month + year + school holiday beats a per-store mean by far,
    yet stays above the oracle's noise floor."""
    train = frames["train.csv"].astype({"Store": int, "Sales": int, "Promo": int, "SchoolHoliday": int,
                                        "DayOfWeek": int})
    train = train[train.Sales > 0]
    date = pd.to_datetime(train.Date)
    design = pd.get_dummies(pd.DataFrame({
        "store": train.Store.astype(str), "dow": train.DayOfWeek.astype(str), "month": date.dt.month.astype(str),
        "year": date.dt.year.astype(str)}), drop_first=True).astype(float)
    design["promo"], design["school"], design["one"] = train.Promo, train.SchoolHoliday, 1.0
    y = np.log(train.Sales.to_numpy(float))
    coef, *_ = np.linalg.lstsq(design.to_numpy(), y, rcond=None)
    linear = exp_rmspe(train.Sales.to_numpy(float), np.exp(design.to_numpy() @ coef))
    store_mean = exp_rmspe(train.Sales.to_numpy(float), np.exp(pd.Series(y).groupby(train.Store.to_numpy())
                                                                .transform("mean").to_numpy()))
    floor = json.loads(open(generated[1]).read())["noise_floor"]["train"]["exp_rmspe"]
    assert linear < 0.7 * store_mean
    assert linear > floor


# --- determinism, scale, CLI, Spark (land: test_synth_drops.py) -----------------------------------------------

def test_same_seed_same_bytes_other_seed_other_data():
    first, again = build_dataset(SynthConfig(stores=7, seed=3)), build_dataset(SynthConfig(stores=7, seed=3))
    assert first.files == again.files and first.truth == again.truth
    assert first.expected_parquet == again.expected_parquet
    other = build_dataset(SynthConfig(stores=7, seed=4))
    assert other.files["train.csv"] != first.files["train.csv"]
    assert other.files["weather.csv"] != first.files["weather.csv"]
    assert other.files["state_names.csv"] == first.files["state_names.csv"]
    noisier = build_dataset(SynthConfig(stores=7, seed=3, sigma=0.3))
    assert noisier.truth["noise_floor"]["train"]["exp_rmspe"] > 2 * first.truth["noise_floor"]["train"]["exp_rmspe"]


def test_full_scale_matches_real_sizes_and_statistics():
    dataset = build_dataset(SynthConfig(stores=REAL_STORES, seed=42))
    train = pd.read_csv(io.BytesIO(dataset.files["train.csv"]), usecols=["Store", "Sales"])
    assert abs(len(train) - 1_017_209) <= 0.01 * 1_017_209
    assert train.Store.nunique() == REAL_STORES
    assert len(pd.read_csv(io.BytesIO(dataset.files["test.csv"]))) == 41_088
    assert len(pd.read_csv(io.BytesIO(dataset.files["weather.csv"]))) == 15_840
    assert len(pd.read_csv(io.BytesIO(dataset.files["googletrend.csv"]))) == 2_072
    assert train.Sales.mean() == pytest.approx(5774, rel=0.08)
    assert 30_000 < train.Sales.max() < 55_000


def test_cli_generate_and_argument_errors(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = tmp_path / "raw"
    done = subprocess.run([sys.executable, "-m", "rossmann_jobs.synth", "generate", "--out", str(out),
                           "--stores", "3", "--seed", "1", "--truth-out", str(tmp_path / "truth.json")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(out)) == sorted(EXPECTED_COLUMNS)
    assert json.loads((tmp_path / "truth.json").read_text())["stores"] == 3
    assert (tmp_path / "truth.expected.parquet").exists()

    bad = subprocess.run([sys.executable, "-m", "rossmann_jobs.synth", "generate", "--out", str(tmp_path / "x"),
                          "--stores", "0"], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--stores must be at least 1" in bad.stderr
    inside = subprocess.run([sys.executable, "-m", "rossmann_jobs.synth", "generate", "--out", str(out),
                             "--truth-out", str(out / "truth.json")], env=env, capture_output=True, text=True,
                            timeout=120)
    assert inside.returncode == 2 and "inside the raw-data folder" in inside.stderr


def test_generate_to_s3(s3_bucket):
    out = f"{s3_bucket}/raw"
    cli.generate(out, SynthConfig(stores=4, seed=2))
    assert sorted(f.rsplit("/", 1)[1] for f in storage.list_files(out)) == sorted(EXPECTED_COLUMNS)
    truth = storage.read_json(f"{s3_bucket}/raw.truth.json")
    assert storage.exists(f"{s3_bucket}/{truth['expected_values']}")
    train = pd.read_csv(io.BytesIO(storage.read_bytes(f"{out}/train.csv")))
    assert len(train) == truth["row_counts"]["train.csv"] and train.Store.nunique() == 4


@pytest.mark.slow
def test_spark_reads_quoting_and_reference_joins_lose_no_row(spark, generated):
    from pyspark.sql import functions as F

    out = generated[0]

    def read(name: str):
        return spark.read.csv(storage.spark_uri(os.path.join(out, name)), header=True)

    store_states, state_names, store = read("store_states.csv"), read("state_names.csv"), read("store.csv")
    assert {r.State for r in store_states.collect()} == STORE_STATE_CODES
    assert {r.StateName: r.State for r in state_names.collect()}["Niedersachsen"] == "HB,NI"
    intervals = {r.PromoInterval for r in store.collect()}
    assert intervals - {None} <= {"Jan,Apr,Jul,Oct", "Feb,May,Aug,Nov", "Mar,Jun,Sept,Dec"} and None in intervals
    train, test = read("train.csv"), read("test.csv")
    assert {r.StateHoliday for r in train.select("StateHoliday").distinct().collect()} == {"0", "a", "b", "c"}
    assert test.filter(F.col("Open").isNull()).count() == 11
    assert read("googletrend.csv").first().week == "2012-12-02 - 2012-12-08"

    # The reference pipeline's joins (seed 000: prepare_google_trend + prepare_df) must keep every row.
    trend = (read("googletrend.csv")
             .withColumn("Date", F.regexp_extract("week", "(.*?) -", 1).cast("date"))
             .withColumn("State", F.regexp_extract("file", "Rossmann_DE_(.*)", 1))
             .withColumn("State", F.when(F.col("State") == "NI", "HB,NI").otherwise(F.col("State")))
             .withColumn("Year", F.year("Date")).withColumn("Week", F.weekofyear("Date")))
    trend_de = trend.filter(F.col("file") == "Rossmann_DE").select("Year", "Week", F.col("trend").alias("trend_de"))
    weather = (read("weather.csv").join(state_names, F.col("file") == F.col("StateName"))
               .select("State", F.col("Date").cast("date").alias("Date")))
    both = train.select("Store", "Date").unionByName(test.select("Store", "Date"))
    joined = (both.withColumn("Date", F.col("Date").cast("date"))
              .withColumn("Year", F.year("Date")).withColumn("Week", F.weekofyear("Date"))
              .join(store.join(store_states, "Store"), "Store")
              .join(trend.select("State", "Year", "Week", "trend"), ["State", "Year", "Week"])
              .join(trend_de, ["Year", "Week"])
              .join(weather, ["State", "Date"]))
    expected_rows = sum(len(raw_lines(generated, name)) - 1 for name in ("train.csv", "test.csv"))
    assert joined.count() == expected_rows


def test_exact_quantiles_of_the_log_normal_noise_cover_their_nominal_share_and_narrow_ones_do_not():
    """score_quantiles against the truth: the exact P10-P90 of Sales = expected x exp(N(0, sigma^2)) covers ~80 %;
    an interval a tenth as wide under-covers and loses more; a missing forecast row counts as 0. The same noise
    around a point-in-time expectation 15 % low (a drift after D) under-covers: the reference for what D can know."""
    from rossmann_jobs.synth.truth_scores import score_quantiles

    rng = np.random.default_rng(3)
    as_of, sigma, levels = dt.date(2015, 7, 31), 0.1, (0.1, 0.5, 0.9)
    days = pd.date_range(as_of + dt.timedelta(days=1), periods=48)
    truth = pd.DataFrame([(store, day) for day in days for store in range(1, 201)], columns=["Store", "Date"])
    truth["ExpectedSales"] = rng.uniform(2000, 9000, len(truth))
    truth["Sales"] = np.round(truth["ExpectedSales"] * np.exp(rng.normal(0, sigma, len(truth))))
    truth["PointInTimeExpectedSales"] = truth["ExpectedSales"] * 0.85
    plan = truth[["Store", "Date"]].assign(Id=np.arange(1, len(truth) + 1))
    narrow = plan[["Id"]].assign(**{f"P{int(q * 100)}": truth["ExpectedSales"].to_numpy() * np.exp(0.1 * sigma * z)
                                    for q, z in zip(levels, (-1.2816, 0.0, 1.2816))})
    scores = score_quantiles(truth, plan, as_of, sigma, levels, {"narrow": narrow.iloc[:-10]})
    assert scores["rows"] == len(truth) and scores["nominal_coverage"] == pytest.approx(0.8)
    assert abs(scores["exact"]["coverage"] - 0.8) < 0.015
    assert sorted(scores["exact"]["by_lead_week"]) == list(range(1, 8))
    assert scores["narrow"]["coverage"] < 0.2
    assert scores["narrow"]["quantile_loss"] > scores["exact"]["quantile_loss"]
    assert scores["exact_point_in_time"]["coverage"] < 0.6
    assert scores["exact_point_in_time"]["quantile_loss"] > scores["exact"]["quantile_loss"]
