"""End-to-end runs of the prepare job on a tiny hand-shaped drop: layout, schema, accounting, point in time, S3."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from fixtures.tiny_drop import TEST_END, TEST_START, tiny_drop, write_drop
from rossmann_jobs import storage
from rossmann_jobs.features.raw_schemas import RAW_FILES
from rossmann_jobs.features.spec import CATEGORICAL_COLS, CONTINUOUS_COLS, FEATURE_COLS, UNFED_BEFORE_COLS
from rossmann_jobs.features.validate import RawInputError
from rossmann_jobs.output_layout import METADATA_FILE

pytestmark = pytest.mark.slow

AS_OF = date(2015, 7, 31)
PAST_AS_OF = date(2015, 3, 31)
NUM_SHARDS = 4
REPO_ROOT = Path(__file__).resolve().parents[2]
CONTRACT_KEYS = {"feature_spec", "vocabularies", "max_sales", "row_counts", "as_of", "validation_window",
                 "test_window", "input_checksums", "num_shards"}


def read_split(attempt: str, name: str) -> pd.DataFrame:
    return pd.read_parquet(storage.join(attempt, name))


@pytest.fixture(scope="module")
def drop():
    return tiny_drop()


@pytest.fixture(scope="module")
def raw_dir(tmp_path_factory, drop):
    # CRLF line endings and a UTF-8 BOM, as some exports write them.
    return write_drop(str(tmp_path_factory.mktemp("raw")), drop, crlf=True, bom=True)


@pytest.fixture(scope="module")
def prepared(spark, raw_dir, tmp_path_factory):
    from rossmann_jobs.prepare import run_prepare

    out = str(tmp_path_factory.mktemp("features"))
    metadata = run_prepare(spark, raw_dir, out, AS_OF, num_shards=NUM_SHARDS)
    attempt = storage.committed_uri(out)
    return out, attempt, metadata


def fixture_sales(drop, up_to: date = AS_OF) -> dict[tuple[int, date], int]:
    return {(int(r["Store"]), date.fromisoformat(r["Date"])): int(r["Sales"]) for r in drop["train.csv"]
            if date.fromisoformat(r["Date"]) <= up_to}


def test_output_is_committed_with_splits_quarantine_and_metadata(prepared):
    out, attempt, metadata = prepared
    assert CONTRACT_KEYS <= set(metadata)
    assert storage.read_json(storage.join(attempt, METADATA_FILE)) == metadata
    manifest = storage.read_manifest(out)
    assert manifest["attempt"] == attempt[len(out) + 1:]
    for name in ("train", "validation", "test"):
        assert any(f.startswith(f"{name}/") and f.endswith(".parquet") for f in manifest["files"])
    assert metadata["as_of"] == AS_OF.isoformat()
    assert set(metadata["input_checksums"]) == set(RAW_FILES)


def test_splits_follow_the_feature_spec(prepared):
    _out, attempt, metadata = prepared
    for name in ("train", "validation", "test"):
        schema = pads.dataset(storage.join(attempt, name), format="parquet").schema
        types = {field.name: str(field.type) for field in schema}
        assert all(types[c] == "int32" for c in CATEGORICAL_COLS), name
        assert all(types[c] == "float" for c in CONTINUOUS_COLS), name
        assert types["StoreId"] == "int32" and types["Date"] == "date32[day]"
        if name == "test":
            assert types["Id"] == "int32" and types["Open"] == "int32" and "Sales" not in types
        else:
            assert types["Sales"] == "float"
    spec = metadata["feature_spec"]
    assert [c["name"] for c in spec["categorical"]] == CATEGORICAL_COLS
    assert spec["continuous"] == CONTINUOUS_COLS
    for entry in spec["categorical"]:
        assert entry["vocab_size"] == len(metadata["vocabularies"][entry["name"]]) + 1
    for name in ("train", "validation", "test"):
        frame = read_split(attempt, name)
        assert not frame[FEATURE_COLS].isna().any().any(), name
        for entry in spec["categorical"]:
            assert frame[entry["name"]].between(0, entry["vocab_size"] - 1).all(), (name, entry)


def test_shards_are_near_equal_and_listed_with_their_row_counts(prepared):
    _out, attempt, metadata = prepared
    assert metadata["num_shards"] == NUM_SHARDS
    for name in ("train", "validation", "test"):
        shards = metadata["shards"][name]
        assert len(shards) == NUM_SHARDS
        for shard in shards:
            assert pq.ParquetFile(storage.join(attempt, name, shard["file"])).metadata.num_rows == shard["rows"]
        counts = [shard["rows"] for shard in shards]
        assert sum(counts) == metadata["row_counts"][name]
        # Rows are hashed to shards: the spread is binomial, a few standard deviations at most.
        mean = sum(counts) / NUM_SHARDS
        assert max(counts) - min(counts) <= 4 * math.sqrt(mean) + 1, counts


def test_every_input_row_is_accounted_for_independently_of_the_job(prepared, drop):
    _out, attempt, metadata = prepared
    sales = fixture_sales(drop)
    # The out-of-time validation window: the horizon's length of days up to as-of.
    first_validation, last_validation = AS_OF - (TEST_END - TEST_START), AS_OF
    validation_days = {k for k, v in sales.items() if v > 0 and first_validation <= k[1] <= last_validation}
    zero = sum(1 for v in sales.values() if v == 0)
    assert metadata["row_counts"]["files"]["train.csv"] == {
        "zero_sales": zero, "validation": len(validation_days), "train": len(sales) - zero - len(validation_days)}
    assert metadata["row_counts"]["files"]["test.csv"] == {"test": len(drop["test.csv"])}
    # Strict point in time (the default): weather days after as-of are counted, not used.
    weather_after = sum(1 for r in drop["weather.csv"] if date.fromisoformat(r["Date"]) > AS_OF)
    assert metadata["row_counts"]["files"]["weather.csv"] == {"accepted": len(drop["weather.csv"]) - weather_after,
                                                              "after_as_of": weather_after}
    assert metadata["row_counts"]["rejected"] == 0
    validation = read_split(attempt, "validation")
    assert set(zip(validation["StoreId"], validation["Date"])) == validation_days
    assert metadata["validation_window"]["start"] == first_validation.isoformat()


def test_labels_keys_and_max_sales_come_from_the_raw_rows(prepared, drop):
    _out, attempt, metadata = prepared
    sales = fixture_sales(drop)
    train = pd.concat([read_split(attempt, "train"), read_split(attempt, "validation")])
    got = {(int(s), d): float(label) for s, d, label in zip(train["StoreId"], train["Date"], train["Sales"])}
    assert set(got) == {k for k, v in sales.items() if v > 0}
    for key, label in got.items():
        assert label == pytest.approx(math.log(sales[key]), rel=1e-6)
    assert metadata["max_sales"] == max(sales.values())


def test_test_split_keeps_every_id_and_the_blank_open(prepared, drop):
    _out, attempt, _metadata = prepared
    test = read_split(attempt, "test").set_index("Id").sort_index()
    assert list(test.index) == [int(r["Id"]) for r in drop["test.csv"]]
    blank = [int(r["Id"]) for r in drop["test.csv"] if r["Open"] == ""]
    assert test.loc[blank, "Open"].isna().all() and test.drop(index=blank)["Open"].notna().all()


def test_vocabularies_are_the_sorted_values_of_train_and_horizon(prepared):
    _out, _attempt, metadata = prepared
    vocab = metadata["vocabularies"]
    assert vocab["Store"] == [1, 2, 3]
    assert vocab["State"] == ["BY", "HB,NI", "NW"]
    assert vocab["StateHoliday"] == [False, True]
    # Strict point in time: no row is given an event (the horizon knows none), so Events has no value at all.
    assert vocab["Events"] == []
    assert vocab["PromoInterval"] == ["Jan,Apr,Jul,Oct", "Mar,Jun,Sept,Dec"]
    assert vocab["CompetitionOpenSinceYear"] == [1900, 2014]


def expected_after_counts(drop, as_of: date) -> dict[tuple[int, date], dict[str, int]]:
    """A direct per-store loop over the raw rows (train <= as_of and test > as_of): the After<Event> day counts as the
    example defines them (its Before counts are not written: spec.UNFED_BEFORE_COLS)."""
    rows = [(int(r["Store"]), date.fromisoformat(r["Date"]), r) for r in drop["train.csv"]
            if date.fromisoformat(r["Date"]) <= as_of]
    rows += [(int(r["Store"]), date.fromisoformat(r["Date"]), r) for r in drop["test.csv"]
             if date.fromisoformat(r["Date"]) > as_of]
    events = {"Promo": lambda r: r["Promo"] != "0", "StateHoliday": lambda r: r["StateHoliday"] != "0",
              "SchoolHoliday": lambda r: r["SchoolHoliday"] != "0"}
    result: dict[tuple[int, date], dict[str, int]] = {}
    for store in {s for s, _d, _r in rows}:
        mine = sorted((d, r) for s, d, r in rows if s == store)
        for name, is_event in events.items():
            last = mine[0][0]
            for d, r in mine:
                last = d if is_event(r) else last
                result.setdefault((store, d), {})["After" + name] = (d - last).days
    return result


def test_elapsed_days_match_a_direct_loop_over_the_raw_rows(prepared, drop):
    """The written After counts; the Before counts (spec.UNFED_BEFORE_COLS: they count down to the plan's end) are
    not written."""
    _out, attempt, _metadata = prepared
    expected = expected_after_counts(drop, AS_OF)
    frames = [read_split(attempt, name) for name in ("train", "validation", "test")]
    for frame in frames:
        assert not set(UNFED_BEFORE_COLS) & set(frame.columns)
        for row in frame.to_dict("records"):
            want = expected[(int(row["StoreId"]), row["Date"])]
            assert len(want) == 3 and {k: int(row[k]) for k in want} == want, row


# HotSpot never JIT-compiles a method of more than 8,000 bytes of bytecode (-XX:HugeMethodLimit, on by default):
# a generated stage above it runs interpreted. The fused feature stage is within ~10 % of it (bench/RESULTS.md).
HOTSPOT_HUGE_METHOD_LIMIT = 8000


def test_generated_code_of_the_feature_pass_and_the_writes_stays_jit_compilable(spark, raw_dir, prepared):
    from rossmann_jobs.features import encode, split
    from rossmann_jobs.features.pipeline import classify_lookups, classify_sales, sales_features, sales_rows
    from rossmann_jobs.features.validate import parse_columns, read_text_csv
    from rossmann_jobs.spark_session import materialized, release

    metadata = prepared[2]
    parsed = {name: parse_columns(read_text_csv(spark, storage.join(raw_dir, name), raw_file), raw_file)
              for name, raw_file in RAW_FILES.items()}
    lookups, _ = classify_lookups(parsed, RAW_FILES, AS_OF)
    features = sales_features(sales_rows(parsed["train.csv"], parsed["test.csv"]), lookups, AS_OF, parsed["test.csv"])
    rows = materialized(features)   # as the job does: the writes start from the materialized rows
    windows = split.plan_windows(AS_OF, date.fromisoformat(metadata["test_window"]["start"]),
                                 date.fromisoformat(metadata["test_window"]["end"]))
    encoded = encode.encode_features(classify_sales(rows, windows, None, 42), metadata["vocabularies"])
    frames = {"features": features, **{name: encode.encoded_split(encoded, name) for name in encode.SPLIT_COLUMNS}}
    adaptive = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")   # the plain plan: the same code, no query stages
    try:
        sizes = {}
        for name, frame in frames.items():
            stages = frame._jdf.queryExecution().debug().codegenToSeq()
            for i in range(stages.size()):
                stage = stages.apply(i)
                sizes[f"{name}: {stage._1().splitlines()[0][:80]}"] = stage._3().maxMethodCodeSize()
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", adaptive)
        release(rows)
    assert len(sizes) > 10 and max(sizes.values()) > 4000   # it did compile the big stages
    # A stage above HotSpot's limit would run interpreted; the jobs' Spark conf makes Spark run it operator by
    # operator instead. Only the fused feature stage may need that (it crossed the limit with the origin features):
    # the split writes must stay fused and compiled.
    assert int(spark.conf.get("spark.sql.codegen.hugeMethodLimit")) <= HOTSPOT_HUGE_METHOD_LIMIT
    over = {stage: size for stage, size in sizes.items()
            if size >= HOTSPOT_HUGE_METHOD_LIMIT and not stage.startswith("features:")}
    assert not over, over


def test_a_failed_run_leaves_the_committed_output_untouched(spark, prepared, drop, tmp_path):
    from rossmann_jobs.prepare import run_prepare

    out, attempt, _metadata = prepared
    broken = write_drop(str(tmp_path / "raw"), {k: v for k, v in drop.items() if k != "weather.csv"})
    with pytest.raises(RawInputError, match="weather.csv: missing from the raw drop"):
        run_prepare(spark, broken, out, AS_OF, num_shards=NUM_SHARDS)
    assert storage.committed_uri(out) == attempt


# --- point in time ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def past_runs(spark, drop, tmp_path_factory):
    """as-of PAST_AS_OF on the full drop, and on a drop whose train rows after it were changed or deleted."""
    from rossmann_jobs.prepare import run_prepare

    rewritten = {**drop, "train.csv": []}
    for row in drop["train.csv"]:
        day = date.fromisoformat(row["Date"])
        if day <= PAST_AS_OF:
            rewritten["train.csv"].append(row)
        elif day.day % 3:  # later history differs: other promos and sales, some days missing
            rewritten["train.csv"].append({**row, "Promo": str(1 - int(row["Promo"])),
                                           "Sales": str(int(row["Sales"]) * 3)})
    results = []
    for files in (drop, rewritten):
        raw = write_drop(str(tmp_path_factory.mktemp("raw_past")), files)
        out = str(tmp_path_factory.mktemp("features_past"))
        metadata = run_prepare(spark, raw, out, PAST_AS_OF, num_shards=2)
        attempt = storage.committed_uri(out)
        results.append((metadata, {name: read_split(attempt, name).sort_values(["StoreId", "Date"])
                                   .reset_index(drop=True) for name in ("train", "validation", "test")}))
    return results


def test_past_as_of_uses_only_rows_known_then(past_runs, drop):
    metadata, splits = past_runs[0]
    assert max(splits["train"]["Date"].max(), splits["validation"]["Date"].max()) <= PAST_AS_OF
    assert len(splits["test"]) == len(drop["test.csv"])  # the horizon: every test row after as-of
    # Out of time: the horizon's length of days up to the as-of date (the horizon is the whole test period).
    assert metadata["validation_window"]["start"] == (PAST_AS_OF - (TEST_END - TEST_START)).isoformat()
    assert metadata["validation_window"]["end"] == PAST_AS_OF.isoformat()
    after = sum(1 for r in drop["train.csv"] if date.fromisoformat(r["Date"]) > PAST_AS_OF)
    assert metadata["row_counts"]["files"]["train.csv"]["after_as_of"] == after
    assert metadata["max_sales"] == max(v for v in fixture_sales(drop, PAST_AS_OF).values())


def test_past_as_of_output_does_not_depend_on_later_history(past_runs):
    (metadata, splits), (other_metadata, other_splits) = past_runs
    for name in ("train", "validation", "test"):
        pd.testing.assert_frame_equal(splits[name], other_splits[name], check_like=True)
    assert metadata["vocabularies"] == other_metadata["vocabularies"]
    assert metadata["max_sales"] == other_metadata["max_sales"]


def test_as_of_after_the_whole_test_period_is_a_clear_error(spark, raw_dir, tmp_path):
    from rossmann_jobs.prepare import run_prepare

    # Refused before the feature pass: the drop does not hold the actuals of that date (features/freshness.py).
    with pytest.raises(RawInputError, match="train.csv: stale extract: its latest row in column 'Date' is dated "
                                            "2015-07-31, 61 days before --as-of 2015-09-30"):
        run_prepare(spark, raw_dir, str(tmp_path / "out"), date(2015, 9, 30))


# --- the command line against S3 --------------------------------------------------------------------------------

def spark_submit(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    jobs_bin = str(Path(sys.executable).parent)
    env = {**os.environ, **env, "PATH": jobs_bin + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": str(REPO_ROOT)}
    command = [os.path.join(jobs_bin, "spark-submit"), "--master", "local[2]",
               "--conf", "spark.sql.shuffle.partitions=4", str(REPO_ROOT / "rossmann_jobs" / "prepare.py"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


def test_spark_submit_reads_and_writes_s3(s3_bucket, s3_server, raw_dir, prepared):
    storage.upload_dir(raw_dir, f"{s3_bucket}/raw/2015-07-31")
    out = f"{s3_bucket}/features"
    done = spark_submit(["--raw", f"{s3_bucket}/raw/2015-07-31", "--out", out, "--as-of", AS_OF.isoformat(),
                         "--num-shards", str(NUM_SHARDS)], {})
    assert done.returncode == 0, done.stderr[-3000:]
    metadata = storage.read_json(storage.join(storage.committed_uri(out), METADATA_FILE))
    _local_out, _attempt, local_metadata = prepared
    assert metadata["row_counts"] == local_metadata["row_counts"]
    assert metadata["vocabularies"] == local_metadata["vocabularies"]
    assert metadata["input_checksums"] == local_metadata["input_checksums"]
    assert "testing-secret" not in done.stderr + done.stdout


def test_spark_submit_fails_with_exit_code_2_and_the_reason(tmp_path, drop):
    raw = write_drop(str(tmp_path / "raw"), drop,
                     overrides={"store.csv": "Store;StoreType;Assortment\n1;a;a\n"})
    done = spark_submit(["--raw", raw, "--out", str(tmp_path / "out"), "--as-of", AS_OF.isoformat()], {})
    assert done.returncode == 2
    # The driver's Python log can land on either stream, depending on how spark-submit was started.
    assert "store.csv: wrong delimiter" in done.stdout + done.stderr
    assert not storage.exists(storage.join(str(tmp_path / "out"), storage.MANIFEST_NAME))


def test_the_levels_join_by_a_shuffle_above_the_broadcast_size_gives_the_same_features(spark, raw_dir):
    """At 10x Rossmann the broadcast levels table outgrew a 2g driver's heap: above
    recent_level.MAX_SALES_ROWS_TO_BROADCAST_LEVELS the job joins it by a shuffle. Both joins give the same rows."""
    from pyspark.sql import functions as F

    from rossmann_jobs.features import recent_level
    from rossmann_jobs.features.pipeline import sales_rows
    from rossmann_jobs.features.spec import ORIGIN_COLS
    from rossmann_jobs.features.split import SOURCE
    from rossmann_jobs.features.validate import parse_columns, read_text_csv

    assert recent_level.broadcast_levels(1_017_209 + 41_088)          # Rossmann's train.csv + test.csv
    assert not recent_level.broadcast_levels(10 * (1_017_209 + 41_088))
    parsed = {name: parse_columns(read_text_csv(spark, storage.join(raw_dir, name), RAW_FILES[name]), RAW_FILES[name])
              for name in ("train.csv", "test.csv")}
    rows = sales_rows(parsed["train.csv"], parsed["test.csv"]).filter(F.col("Promo").isNotNull())
    history = (F.col(SOURCE) == "train") & (F.col("Date") <= F.lit(AS_OF)) & (F.col("Sales") > 0)

    def features(broadcast: bool):
        frame = recent_level.add_origin_features(rows, AS_OF, history, broadcast=broadcast)
        plan = frame._jdf.queryExecution().executedPlan().toString()
        out = (frame.select(SOURCE, "Store", "Date", *ORIGIN_COLS).toPandas()
               .sort_values([SOURCE, "Store", "Date"]).reset_index(drop=True))
        return ("BroadcastHashJoin" in plan, "SortMergeJoin" in plan), out

    (broadcast_plan, broadcast_rows), (shuffle_plan, shuffle_rows) = features(True), features(False)
    assert broadcast_plan == (True, False) and shuffle_plan == (False, True)
    assert len(broadcast_rows) > 1000 and broadcast_rows[ORIGIN_COLS].notna().all().all()
    pd.testing.assert_frame_equal(broadcast_rows, shuffle_rows)
