"""Drop integrity on the generator's own drops: stale or partial extracts and stale plans refused, broken lookup
files named as such, harmless export variants read as the clean file, corrupted files refused, and trend weeks
keyed correctly in years whose 1 January is a Sunday."""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import random

import pandas as pd
import pytest

from rossmann_jobs import storage
from rossmann_jobs.features import point_in_time
from rossmann_jobs.features.validate import RawInputError
from rossmann_jobs.synth import DailyDrops, SynthConfig, build_dataset
from testkit.feature_fixtures import committed_split_frames
from testkit.timeshift import shifted_drop, weeks_between

CONFIG = SynthConfig(stores=6, seed=5)
AS_OF = dt.date(2015, 7, 31)     # a Friday: the generator's last train day, the drop's plan is Kaggle's test period
DAY = dt.timedelta(days=1)


@pytest.fixture(scope="module")
def drops():
    return DailyDrops(build_dataset(CONFIG))


@pytest.fixture()
def drop(drops):
    return dict(drops.files_on(AS_OF))


def write_raw(folder, files) -> str:
    folder.mkdir(parents=True)
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return str(folder)


def prepare(spark, tmp_path, files, as_of=AS_OF, name="raw", **kwargs):
    from rossmann_jobs.prepare import run_prepare

    raw = write_raw(tmp_path / name, files)
    return run_prepare(spark, raw, str(tmp_path / f"{name}-out"), as_of, num_shards=2, **kwargs)


def frame(content: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(content), dtype=str, keep_default_na=False)


def csv_bytes(df: pd.DataFrame, **kwargs) -> bytes:
    return df.to_csv(index=False, **kwargs).encode("utf-8")


def without_lines(content: bytes, drop_line) -> bytes:
    header, *rows = content.decode().split("\n")
    return "\n".join([header, *[row for row in rows if not (row and drop_line(row))]]).encode()


# --- freshness: the drop holds D's actuals and the plan from D+1 ------------------------------------------------

def test_a_stale_extract_is_refused_naming_train_csv_and_its_last_rows(spark, tmp_path, drops, drop):
    drop["train.csv"] = drops.files_on(AS_OF - 3 * DAY)["train.csv"]    # last rows three days before D
    with pytest.raises(RawInputError) as error:
        prepare(spark, tmp_path, drop)
    message = str(error.value)
    assert message.startswith("train.csv: stale extract: its latest row in column 'Date' is dated 2015-07-28, "
                              "3 days before --as-of 2015-07-31 (--max-staleness-days 0 allows 0)")
    assert "Store 1: last row 2015-07-28" in message


def test_a_partial_extract_is_refused_naming_the_store_that_is_missing_on_d(spark, tmp_path, drop):
    planned = sorted(set(frame(drop["test.csv"]).Store), key=int)
    store = planned[-1]
    drop["train.csv"] = without_lines(drop["train.csv"], lambda row: row.startswith(f"{store},")
                                      and f",{AS_OF}," in row)
    with pytest.raises(RawInputError) as error:
        prepare(spark, tmp_path, drop)
    message = str(error.value)
    assert message.startswith("train.csv: partial extract: 1 stores that reported in the 7 days before 2015-07-31")
    assert f"Store {store}: last row 2015-07-30" in message


def test_a_stale_plan_is_refused_in_prepare_naming_test_csv_and_its_rows(spark, tmp_path, drops, drop):
    drop["test.csv"] = drops.files_on(AS_OF - 7 * DAY)["test.csv"]     # last week's plan
    stale_rows = sum(date <= str(AS_OF) for date in frame(drop["test.csv"]).Date)
    assert stale_rows > 0
    with pytest.raises(RawInputError) as error:
        prepare(spark, tmp_path, drop)
    message = str(error.value)
    assert message.startswith(f"test.csv: stale plan: {stale_rows} rows are dated on or before --as-of 2015-07-31 "
                              "in column 'Date' (the plan must start at 2015-08-01)")
    assert '"Date":"2015-07-25"' in message        # an example row: the stale plan's first day


def facts(store, last_train, first_plan, train_after=0, plan_not_after=0):
    from rossmann_jobs.features import freshness

    return {"Store": store, freshness.LAST_TRAIN: last_train, freshness.TRAIN_AFTER: train_after,
            freshness.FIRST_PLAN: first_plan, freshness.PLAN_NOT_AFTER: plan_not_after}


def test_freshness_rule_tolerance_closures_and_snapshots():
    from rossmann_jobs.features.freshness import check_freshness

    def check(stores, staleness=0):
        check_freshness(stores, AS_OF, staleness, lambda: [])

    late = [facts(1, AS_OF - 2 * DAY, AS_OF + DAY)]
    with pytest.raises(RawInputError, match="stale extract"):
        check(late)
    check(late, staleness=2)                                       # late actuals, within the tolerance
    # A store closed for weeks (a refurbishment) is not a partial extract, nor one that is not in the plan.
    check([facts(1, AS_OF, AS_OF + DAY), facts(2, AS_OF - 40 * DAY, AS_OF + DAY), facts(3, AS_OF - DAY, None)])
    with pytest.raises(RawInputError, match="partial extract: 1 stores"):
        check([facts(1, AS_OF, AS_OF + DAY), facts(2, AS_OF - DAY, AS_OF + DAY)])
    # A plan that starts later (a backtest against a later test period) is the documented horizon, not refused.
    check([facts(1, AS_OF, AS_OF + 30 * DAY, train_after=29)])
    check([facts(1, AS_OF, AS_OF + 30 * DAY)])
    with pytest.raises(RawInputError, match="no row is dated on or before --as-of"):
        check([facts(1, None, AS_OF + DAY)])


# --- each file on its own: errors name the cause ----------------------------------------------------------------

def decimal_commas(drop):
    weather = frame(drop["weather.csv"])
    for column in ("Max_TemperatureC", "Mean_TemperatureC", "Min_TemperatureC"):
        weather[column] = weather[column] + ",0"     # a German export: "12,0"; quoted, as the comma needs
    drop["weather.csv"] = csv_bytes(weather)


def day_first_dates(drop):
    plan = frame(drop["test.csv"])
    plan["Date"] = pd.to_datetime(plan["Date"]).dt.strftime("%d.%m.%Y")
    drop["test.csv"] = csv_bytes(plan)


def text_in_a_number(drop):
    store = frame(drop["store.csv"])
    store.loc[0, "CompetitionDistance"] = "far"
    drop["store.csv"] = csv_bytes(store)


def out_of_range_plan_row(drop):
    plan = frame(drop["test.csv"])
    plan.loc[5, "Promo"] = "3"
    drop["test.csv"] = csv_bytes(plan)


LOOKUP_PROBLEMS = {
    "weather.csv with decimal commas": (
        decimal_commas, "weather.csv: ", "decimal comma (expected a decimal point, e.g. 12.5) in column "
                                         "'Max_TemperatureC'", '"Max_TemperatureC":"', 0.001),
    "test.csv dated DD.MM.YYYY": (
        day_first_dates, "test.csv: ", "date as DD.MM.YYYY or MM/DD/YYYY (expected YYYY-MM-DD) in column 'Date'",
        '.2015"', 0.001),
    "store.csv with text in a number": (
        text_in_a_number, "store.csv: ", "unparseable double in column 'CompetitionDistance'", '"far"', 0.001),
    # Under --max-reject-fraction, but a plan row cannot be quarantined: it fails at once, before any join.
    "test.csv row out of range": (
        out_of_range_plan_row, "test.csv: 1 of ", "out of range [0, 1] in column 'Promo'", '"Promo":"3"', 0.5),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(LOOKUP_PROBLEMS))
def test_a_broken_file_is_named_with_its_column_and_examples_before_any_join(spark, tmp_path, drop, case):
    change, start, problem, example, max_reject_fraction = LOOKUP_PROBLEMS[case]
    change(drop)
    with pytest.raises(RawInputError) as error:
        prepare(spark, tmp_path, drop, max_reject_fraction=max_reject_fraction)
    message = str(error.value)
    assert message.startswith(start), message
    assert problem in message, message
    assert example in message.split(problem, 1)[1].split("\n")[0]
    assert "train.csv" not in message.split("\n")[0]     # the cause, not its symptom in the sales rows


# --- corruption: refused before any row is read -----------------------------------------------------------------

def nul_block(drop):
    content = drop["train.csv"]
    start = len(content) // 2
    drop["train.csv"] = content[:start] + b"\x00" * 4096 + content[start + 4096:]   # a bad copy: ~110 rows gone
    return "train.csv", "control bytes (NUL or other binary data)"


def binary_garbage(drop):
    content = drop["weather.csv"]
    start = len(content) // 3
    garbage = random.Random(0).randbytes(512)
    drop["weather.csv"] = content[:start] + garbage + content[start + 512:]
    return "weather.csv", ""


def ctrl_z_inside(drop):
    content = drop["store.csv"]
    cut = content.index(b"\n", len(content) // 2) + 1
    drop["store.csv"] = content[:cut] + b"\x1a" + content[cut:]      # an end-of-file marker with rows after it
    return "store.csv", "control bytes (NUL or other binary data)"


def latin_1(drop):
    drop["state_names.csv"] = drop["state_names.csv"].replace(b"BadenWuerttemberg", "BadenWürttemberg".encode(
        "latin-1"))
    return "state_names.csv", "bytes that are not UTF-8 text"


@pytest.mark.parametrize("corrupt", [nul_block, binary_garbage, ctrl_z_inside, latin_1], ids=lambda f: f.__name__)
def test_a_corrupted_file_is_refused_naming_the_file_and_where(spark, tmp_path, drop, corrupt):
    name, what = corrupt(drop)
    with pytest.raises(RawInputError) as error:
        prepare(spark, tmp_path, drop)
    message = str(error.value)
    assert message.startswith(f"{name}: the file is corrupted, it holds {what}"), message
    assert " (line " in message


# --- harmless export variants: read as the clean file -----------------------------------------------------------

def r_export(content: bytes) -> bytes:
    """As R's write.csv writes a table: strings quoted, a missing value as NA."""
    table = frame(content)
    out = io.StringIO()
    numeric = {"Store", "CompetitionDistance", "CompetitionOpenSinceMonth", "CompetitionOpenSinceYear", "Promo2",
               "Promo2SinceWeek", "Promo2SinceYear"}
    out.write(",".join(f'"{name}"' for name in table.columns) + "\n")
    for row in table.itertuples(index=False):
        out.write(",".join("NA" if value == "" else value if name in numeric else f'"{value}"'
                           for name, value in zip(table.columns, row)) + "\n")
    return out.getvalue().encode()


def harmless_variants(drop) -> dict[str, bytes]:
    crlf = {name: content.replace(b"\n", b"\r\n") for name, content in drop.items()}
    return {
        "train.csv": crlf["train.csv"] + b"\x1a",                          # DOS: CRLF and an end-of-file Ctrl-Z
        "test.csv": drop["test.csv"].rstrip(b"\n") + b"\x1a",              # Ctrl-Z right after the last field
        "store.csv": r_export(drop["store.csv"]),                         # R: quoted strings, NA
        "store_states.csv": drop["store_states.csv"].replace(b"\n", b"\r"),   # Excel for Mac: CR only
        "state_names.csv": drop["state_names.csv"] + b"\x1a",
        "googletrend.csv": drop["googletrend.csv"].replace(b"\n", b"\r"),
        "weather.csv": crlf["weather.csv"],
    }


@pytest.mark.slow
def test_harmless_export_variants_give_the_features_of_the_clean_drop(spark, tmp_path, drop):
    variants = harmless_variants(drop)
    assert b"NA" in variants["store.csv"] and b"\n" not in variants["store_states.csv"]
    clean = prepare(spark, tmp_path, drop, name="clean")
    variant = prepare(spark, tmp_path, variants, name="variant")
    for key in ("feature_spec", "vocabularies", "max_sales", "row_counts", "validation_window", "test_window"):
        assert variant[key] == clean[key], key
    assert variant["row_counts"]["rejected"] == 0
    assert all(variant["input_checksums"][name] != clean["input_checksums"][name] for name in drop)
    clean_rows = committed_split_frames(str(tmp_path / "clean-out"))
    variant_rows = committed_split_frames(str(tmp_path / "variant-out"))
    for name, rows in clean_rows.items():
        assert len(rows) > 0
        pd.testing.assert_frame_equal(variant_rows[name], rows)


# --- calendar: years whose 1 January is a Sunday ----------------------------------------------------------------

def sales_on_closed_days(drop, count):
    """count closed train.csv rows given sales; returns the changed rows' (Store, Date)."""
    train = frame(drop["train.csv"])
    closed = train.index[(train.Open == "0") & (train.Sales == "0")][:count]
    train.loc[closed, "Sales"] = "1234"
    drop["train.csv"] = csv_bytes(train, quoting=csv.QUOTE_MINIMAL)
    return [(train.Store[i], train.Date[i]) for i in closed]


def own_trend_week(day: dt.date) -> dt.date:
    """The Sunday starting the trend week a day meets in strict mode: the Sunday that ends its ISO week."""
    return day + dt.timedelta(days=6 - day.weekday())


@pytest.mark.slow
@pytest.mark.parametrize("as_of", [dt.date(2017, 12, 1), dt.date(2023, 12, 1)], ids=str)
def test_trend_weeks_keyed_right_when_1_january_is_a_sunday(spark, tmp_path, drop, as_of):
    """The drop of 2015-07-31 moved to a Friday in December of 2017 or 2023: the horizon runs into the next year.

    Every horizon day's trend week ends after as-of, so every horizon row gets its state's last complete week moved
    by the season to the row's own week, the one starting on the Sunday that ends its ISO week (one value per store
    and week); the reference's calendar-year key gave 25 .. 31 December the week of 1 January instead, a year-old week.
    Checked exactly on Germany's series. The same run quarantines train.csv rows with sales on a closed day, and
    encodes the next year's days as the last trained year.
    """
    assert dt.date(as_of.year, 1, 1).isoweekday() == 7
    moved = shifted_drop(drop, weeks_between(AS_OF, as_of))
    closed_with_sales = sales_on_closed_days(moved, 2)
    metadata = prepare(spark, tmp_path, moved, as_of=as_of)
    assert metadata["test_window"] == {"start": str(as_of + DAY), "end": str(as_of + 48 * DAY)}
    assert metadata["row_counts"]["quarantine_reasons"] == {
        "train.csv": {"sales on a closed day (Open 0, Sales > 0) [Sales]": 2}}
    attempt = storage.committed_uri(str(tmp_path / "raw-out"))
    rejected = [json.loads(line) for f in storage.list_files(storage.join(attempt, "rejected"))
                if f.endswith(".json") for line in storage.read_bytes(f).decode().splitlines()]
    assert sorted((json.loads(r["record"])["Store"], json.loads(r["record"])["Date"]) for r in rejected) == sorted(
        closed_with_sales)
    horizon = committed_split_frames(str(tmp_path / "raw-out"))["test"]
    assert {str(day)[:10] for day in horizon.Date} >= {f"{as_of.year}-12-25", f"{as_of.year}-12-31"}
    horizon = horizon.assign(week=[own_trend_week(pd.Timestamp(day).date()) for day in horizon.Date])
    assert horizon.groupby(["StoreId", "week"]).trend.nunique().eq(1).all()
    trend = frame(moved["googletrend.csv"])
    usable = [(dt.date.fromisoformat(week[:10]), file, float(value)) for file, week, value
              in zip(trend.file, trend.week, trend.trend) if dt.date.fromisoformat(week[-10:]) <= as_of]
    germany = {start: value for start, file, value in usable if file == "Rossmann_DE"}
    last = max(germany)
    drifts = point_in_time.seasonal_drift([(start, value) for start, _file, value in usable],
                                          [(last, week) for week in horizon.week])
    expected = [math.floor(germany[last] * math.exp(drift) + 0.5) for drift in drifts]
    assert horizon.trend_de.tolist() == expected
    assert len(set(expected)) > 1   # the season moves it: persistence would give one value
    # No train row is dated in the next year: its days are encoded as the last trained year, whose embedding row
    # training learnt (encode.AS_LAST_TRAINED_COLS), and the next year is no vocabulary value.
    years = metadata["vocabularies"]["Year"]
    assert years[-1] == as_of.year
    next_year = horizon[pd.to_datetime(horizon.Date).dt.year == as_of.year + 1]
    assert len(next_year) > 0 and set(next_year.Year) == {len(years)}
