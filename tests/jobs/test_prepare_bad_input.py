"""Bad raw drops: each problem fails with an error naming file, column and example rows, or is quarantined."""
from __future__ import annotations

import gzip
import json
from datetime import date

import pandas as pd
import pytest

from fixtures.tiny_drop import csv_text, tiny_drop, write_drop
from rossmann_jobs import storage
from rossmann_jobs.features.drop_manifest import manifest_bytes, parse_manifest
from rossmann_jobs.features.validate import RawInputError
from testkit.feature_fixtures import committed_split_frames

AS_OF = date(2015, 7, 31)


@pytest.fixture()
def drop():
    return tiny_drop()


def run(spark, tmp_path, files, overrides=None, **kwargs):
    from rossmann_jobs.prepare import run_prepare

    raw = write_drop(str(tmp_path / "raw"), files, overrides=overrides)
    out = str(tmp_path / "out")
    metadata = run_prepare(spark, raw, out, AS_OF, num_shards=2, **kwargs)
    return out, metadata


def without_column(name, rows, column):
    return csv_text(name, [{k: v for k, v in r.items() if k != column} for r in rows],
                    header=[c for c in rows[0] if c != column])


# --- file-level problems: the job stops before any Spark work ---------------------------------------------------

def test_missing_file(spark, tmp_path, drop):
    del drop["store_states.csv"]
    with pytest.raises(RawInputError, match=r"store_states.csv: missing from the raw drop .*/raw"):
        run(spark, tmp_path, drop)


def test_missing_column(spark, tmp_path, drop):
    text = without_column("train.csv", drop["train.csv"], "Promo")
    with pytest.raises(RawInputError, match=r"train.csv: missing column\(s\) \['Promo'\]: the header "):
        run(spark, tmp_path, drop, overrides={"train.csv": text})


def test_extra_column_is_ignored_and_a_column_no_feature_reads_may_be_absent(tmp_path, drop):
    from rossmann_jobs.features.drop_verification import inspect_raw_files

    rows = [{**r, "Comment": "x"} for r in drop["store.csv"]]
    overrides = {"store.csv": csv_text("store.csv", rows, header=list(rows[0])),
                 "train.csv": without_column("train.csv", drop["train.csv"], "Customers")}
    inspected = inspect_raw_files(write_drop(str(tmp_path / "raw"), drop, overrides=overrides))
    assert inspected["store.csv"]["columns"] == {"ignored": ["Comment"]}
    assert inspected["train.csv"]["columns"] == {"absent": ["Customers"]}
    assert inspected["test.csv"]["columns"] == {}


def test_wrong_delimiter(spark, tmp_path, drop):
    text = csv_text("store_states.csv", drop["store_states.csv"]).replace(",", ";")
    with pytest.raises(RawInputError, match=r"store_states.csv: wrong delimiter: .*semicolons"):
        run(spark, tmp_path, drop, overrides={"store_states.csv": text})


def test_empty_file(spark, tmp_path, drop):
    with pytest.raises(RawInputError, match="test.csv: the file is empty"):
        run(spark, tmp_path, drop, overrides={"test.csv": ""})


def test_header_without_rows(spark, tmp_path, drop):
    header_only = csv_text("state_names.csv", [])
    with pytest.raises(RawInputError, match="state_names.csv: the file has a header but no data rows"):
        run(spark, tmp_path, drop, overrides={"state_names.csv": header_only})


# --- row-level problems above the threshold: a clear error ------------------------------------------------------

def break_sales(field, value):
    def change(drop):
        drop["train.csv"][5][field] = value
    return change


def duplicate_train_row(drop):
    drop["train.csv"].insert(10, dict(drop["train.csv"][10]))


def drop_store(file_name):
    def change(drop):
        drop[file_name] = [r for r in drop[file_name] if r["Store"] != "3"]
    return change


def unseen_test_store(drop):
    drop["store.csv"].append({**drop["store.csv"][0], "Store": "4"})
    drop["store_states.csv"].append({"Store": "4", "State": "BY"})
    drop["test.csv"].append({**drop["test.csv"][0], "Id": str(len(drop["test.csv"]) + 1), "Store": "4"})


ROW_PROBLEMS = {
    "unparseable number": (break_sales("Sales", "12x"), "train.csv", "unparseable int in column 'Sales'", "12x"),
    "unparseable date": (break_sales("Date", "2015-02-30"), "train.csv", "unparseable date in column 'Date'",
                         "2015-02-30"),
    "negative sales": (break_sales("Sales", "-40"), "train.csv", "negative value in column 'Sales'", '"Sales":"-40"'),
    "duplicate (Store, Date)": (duplicate_train_row, "train.csv",
                                "duplicate key (Store,Date) in column 'Store,Date': 2 rows", '"Store":'),
    "store missing from store.csv": (drop_store("store.csv"), "train.csv",
                                     "Store not in store.csv in column 'Store'", '"Store":3'),
    "store missing from store_states.csv": (drop_store("store_states.csv"), "train.csv",
                                            "Store not in store_states.csv in column 'Store'", '"Store":3'),
    "test store unseen in train": (unseen_test_store, "test.csv",
                                   "Store has no train.csv rows on or before as-of in column 'Store'",
                                   '"Store":4'),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(ROW_PROBLEMS))
def test_row_problem_above_the_threshold_fails_naming_file_column_and_examples(spark, tmp_path, drop, case):
    change, file_name, problem, example = ROW_PROBLEMS[case]
    change(drop)
    with pytest.raises(RawInputError) as error:
        run(spark, tmp_path, drop, max_reject_fraction=0.0)
    message = str(error.value)
    assert message.startswith(f"{file_name}: ")
    assert problem in message
    assert example in message.split(problem, 1)[1].split("\n")[0]
    assert not storage.exists(str(tmp_path / "out" / storage.MANIFEST_NAME))


@pytest.mark.slow
def test_malformed_line_is_reported_with_its_raw_text(spark, tmp_path, drop):
    text = csv_text("train.csv", drop["train.csv"]).replace("\n3,5,2015-07-31,", "\n3,5,2015-07-31;", 1)
    with pytest.raises(RawInputError) as error:
        run(spark, tmp_path, drop, overrides={"train.csv": text}, max_reject_fraction=0.0)
    assert "malformed line (expected 9 fields) in column '*': 1 rows, e.g. 3,5,2015-07-31;" in str(error.value)


# --- row-level problems under the threshold: quarantined, accounted for -----------------------------------------

@pytest.mark.slow
def test_problems_under_the_threshold_are_quarantined_and_accounted_for(spark, tmp_path, drop):
    break_sales("Sales", "12x")(drop)
    duplicate_train_row(drop)
    bad_weather = drop["weather.csv"][0]
    bad_weather["Max_TemperatureC"] = "warm"
    out, metadata = run(spark, tmp_path, drop, max_reject_fraction=0.05)
    attempt = storage.committed_uri(out)
    rejected = [json.loads(line) for f in storage.list_files(storage.join(attempt, "rejected"))
                if f.endswith(".json") for line in storage.read_bytes(f).decode().splitlines()]
    by_problem = {}
    for row in rejected:
        by_problem.setdefault((row["file"], row["reason"], row["column"]), []).append(row["record"])
    no_weather = ("train.csv", "no weather.csv row for (State, Date) via state_names.csv", "State,Date")
    assert {k: len(v) for k, v in by_problem.items()} == {
        ("train.csv", "unparseable int", "Sales"): 1,
        ("train.csv", "duplicate key (Store,Date)", "Store,Date"): 2,
        ("weather.csv", "unparseable double", "Max_TemperatureC"): 1,
        no_weather: 1,  # the weather row is gone, so store 1's train row of that state and day goes too
    }
    assert f'"Date":"{bad_weather["Date"]}"' in by_problem[no_weather][0]
    assert '"Store":1' in by_problem[no_weather][0]
    files = metadata["row_counts"]["files"]
    input_rows = {"train.csv": len(drop["train.csv"]), "test.csv": len(drop["test.csv"]),
                  "weather.csv": len(drop["weather.csv"])}
    for name, rows in input_rows.items():
        assert sum(files[name].values()) == rows, name
    assert files["train.csv"]["quarantined"] == sum(len(v) for k, v in by_problem.items() if k[0] == "train.csv")
    assert metadata["row_counts"]["rejected"] == len(rejected)


@pytest.mark.slow
def test_a_plan_row_that_would_be_quarantined_fails_prepare_whatever_the_threshold(spark, tmp_path, drop):
    unseen_test_store(drop)
    with pytest.raises(RawInputError) as error:
        run(spark, tmp_path, drop, max_reject_fraction=0.5)
    message = str(error.value)
    assert message.startswith(f"test.csv: 1 of {len(drop['test.csv'])} rows of the plan have row-level problems")
    assert "Store has no train.csv rows on or before as-of in column 'Store': 1 rows, e.g." in message
    assert not storage.exists(str(tmp_path / "out" / storage.MANIFEST_NAME))


# --- more file-level problems, and encodings that must be accepted ----------------------------------------------

def test_renamed_column(spark, tmp_path, drop):
    text = csv_text("train.csv", drop["train.csv"]).replace("Sales,Customers", "Sale,Customers", 1)
    with pytest.raises(RawInputError, match=r"train.csv: missing column\(s\) \['Sales'\]: the header "):
        run(spark, tmp_path, drop, overrides={"train.csv": text})


def test_gzip_compressed_file_is_refused(spark, tmp_path, drop):
    raw = write_drop(str(tmp_path / "raw"), drop)
    path = tmp_path / "raw" / "weather.csv"
    path.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(RawInputError, match=r"weather.csv: the file is gzip-compressed; .*Decompress it"):
        run_prepare_on(spark, raw, tmp_path)


def run_prepare_on(spark, raw, tmp_path, **kwargs):
    from rossmann_jobs.prepare import run_prepare

    return run_prepare(spark, raw, str(tmp_path / "out"), AS_OF, num_shards=2, **kwargs)


@pytest.mark.slow
def test_crlf_and_bom_give_the_same_features_as_the_plain_file(spark, tmp_path, drop):
    plain = run_prepare_on(spark, write_drop(str(tmp_path / "plain"), drop), tmp_path / "a")
    windows = run_prepare_on(spark, write_drop(str(tmp_path / "crlf"), drop, crlf=True, bom=True), tmp_path / "b")
    for key in ("feature_spec", "vocabularies", "max_sales", "row_counts", "validation_window", "test_window"):
        assert windows[key] == plain[key], key
    assert windows["row_counts"]["rejected"] == 0
    checksums = {name: (plain["input_checksums"][name]["bytes"], windows["input_checksums"][name]["bytes"])
                 for name in plain["input_checksums"]}
    assert all(crlf_bytes > plain_bytes for plain_bytes, crlf_bytes in checksums.values())  # really different files
    plain_rows = committed_split_frames(str(tmp_path / "a" / "out"))
    windows_rows = committed_split_frames(str(tmp_path / "b" / "out"))
    for name, frame in plain_rows.items():
        assert len(frame) > 0
        pd.testing.assert_frame_equal(windows_rows[name], frame)


# --- run parameters out of range: refused by the CLIs before any work -------------------------------------------

@pytest.mark.parametrize("module, argv, option", [
    ("prepare", ["--sample-rate", "1.5"], "--sample-rate must be in (0, 1]"),
    ("prepare", ["--sample-rate", "0"], "--sample-rate must be in (0, 1]"),
    ("prepare", ["--num-shards", "0"], "--num-shards must be >= 1"),
    ("prepare", ["--as-of", "2015-02-30"], "argument --as-of: invalid fromisoformat value"),
    ("prepare", ["--point-in-time", "loose"], "argument --point-in-time: invalid choice: 'loose'"),
    ("train", ["--epochs", "-3"], "--epochs must be >= 1"),
    ("train", ["--batch-size", "0"], "--batch-size must be >= 1"),
    ("train", ["--num-proc", "0"], "--num-proc must be >= 1"),
])
def test_out_of_range_cli_parameters_are_refused_naming_the_option(capsys, module, argv, option):
    import importlib

    base = {"prepare": ["--raw", "r", "--out", "o", "--as-of", "2015-07-31"],
            "train": ["--features", "f", "--out", "o"]}[module]
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(f"rossmann_jobs.{module}").parse_args(base + argv)
    assert exit_info.value.code == 2
    assert option in capsys.readouterr().err


def test_num_proc_above_the_task_slots_fails_before_horovod_starts(spark):
    from rossmann_jobs.train import resolve_num_proc
    from rossmann_jobs.training.feature_set import FeatureDataError

    slots = spark.sparkContext.defaultParallelism            # local[2]: 2
    assert resolve_num_proc(slots, spark, train_files=16) == slots
    with pytest.raises(FeatureDataError) as error:
        resolve_num_proc(slots + 1, spark, train_files=16)
    assert f"--num-proc {slots + 1} exceeds the {slots} Spark task slots of master local[2]" in str(error.value)
    with pytest.raises(FeatureDataError, match="--num-proc 3 exceeds the 2 train files"):
        resolve_num_proc(3, spark, train_files=2)


def test_slots_of_a_growing_cluster_are_not_a_ceiling():
    from rossmann_jobs.train import slots_are_fixed

    assert slots_are_fixed("local[4]", {}) and slots_are_fixed("spark://m:7077", {"spark.cores.max": "8"})
    assert not slots_are_fixed("spark://m:7077", {})                    # executors may still be registering
    assert not slots_are_fixed("local-cluster[2,1,1024]", {})
    assert not slots_are_fixed("yarn", {"spark.executor.instances": "2", "spark.executor.cores": "2",
                                        "spark.dynamicAllocation.enabled": "true"})


# --- many row-level problems in one drop: each quarantined with its reason, every row accounted for -------------

GERMANY_GAP_SUNDAY = date(2015, 3, 1)      # the Rossmann_DE trend row of this week is missing


def many_row_problems(drop):
    """Row problems of several kinds, each on different rows; returns {(file, reason, column): expected rows}."""
    def row_of(store, day):
        return next(r for r in drop["train.csv"] if r["Store"] == str(store) and r["Date"] == day)

    row_of(1, "2015-07-21")["Open"] = "2"
    for row in drop["store_states.csv"]:                  # a state code that state_names and googletrend lack
        if row["Store"] == "3":
            row["State"] = "XX"
    week = f"{GERMANY_GAP_SUNDAY.isoformat()} - {date(2015, 3, 7).isoformat()}"
    drop["googletrend.csv"] = [r for r in drop["googletrend.csv"]
                               if not (r["file"] == "Rossmann_DE" and r["week"] == week)]
    gap_week = GERMANY_GAP_SUNDAY.isocalendar()[:2]
    store_3_rows = sum(r["Store"] == "3" for r in drop["train.csv"])
    germany_gap_rows = sum(r["Store"] != "3" and date.fromisoformat(r["Date"]).isocalendar()[:2] == gap_week
                           for r in drop["train.csv"])
    return {
        ("train.csv", "out of range [0, 1]", "Open"): 1,
        ("train.csv", "malformed line (expected 9 fields)", "*"): 1,    # the truncated last line (a store 3 row)
        ("train.csv", "no googletrend.csv row for the store's (State, Year, Week)", "State,Year,Week"):
            store_3_rows - 1,
        ("train.csv", "no Rossmann_DE googletrend.csv row for (Year, Week)", "Year,Week"): germany_gap_rows,
    }


def truncated(text):
    """The file cut in the middle of its last row, as an interrupted copy leaves it."""
    body = text.rstrip("\n")
    return body[:body.rindex("\n") + 12]


@pytest.mark.slow
def test_many_row_problems_are_quarantined_with_reasons_and_every_row_is_accounted_for(spark, tmp_path, drop):
    expected = many_row_problems(drop)
    train_text = truncated(csv_text("train.csv", drop["train.csv"]))
    assert train_text.rsplit("\n", 1)[1].startswith("3,")
    out, metadata = run(spark, tmp_path, drop, overrides={"train.csv": train_text}, max_reject_fraction=0.5)
    rejected = [json.loads(line) for f in storage.list_files(storage.join(storage.committed_uri(out), "rejected"))
                if f.endswith(".json") for line in storage.read_bytes(f).decode().splitlines()]
    counts = {}
    for row in rejected:
        counts[(row["file"], row["reason"], row["column"])] = counts.get((row["file"], row["reason"], row["column"]),
                                                                         0) + 1
    assert counts == expected
    assert any(row["record"] == train_text.rsplit("\n", 1)[1] for row in rejected)    # the cut line, verbatim
    files = metadata["row_counts"]["files"]
    for name, rows in drop.items():   # accepted + excluded + quarantined = rows in the file, for all 7 files
        assert sum(files[name].values()) == len(rows), name
        assert files[name].get("quarantined", 0) == sum(n for k, n in expected.items() if k[0] == name), name
    assert metadata["row_counts"]["rejected"] == len(rejected)


# --- the drop's _SUCCESS manifest -------------------------------------------------------------------------------

def landed_drop(tmp_path, files) -> tuple[str, dict[str, bytes]]:
    """A drop closed by its manifest, as `rossmann_jobs.synth land` writes it; returns the folder and the bytes."""
    raw = write_drop(str(tmp_path / "raw"), files)
    contents = {name: (tmp_path / "raw" / name).read_bytes() for name in files}
    (tmp_path / "raw" / "_SUCCESS").write_bytes(manifest_bytes(contents))
    return raw, contents


def test_a_drop_cut_short_mid_row_fails_against_its_manifest_naming_the_file(spark, tmp_path, drop):
    from rossmann_jobs.prepare import run_prepare

    raw, contents = landed_drop(tmp_path, drop)
    whole = contents["train.csv"]
    (tmp_path / "raw" / "train.csv").write_bytes(whole[:len(whole) // 2])   # a copy that stopped half-way, mid-row
    assert not whole[:len(whole) // 2].endswith(b"\n")
    rows, kept = (sum(1 for line in text.splitlines() if line.strip()) - 1 for text in (whole, whole[:len(whole) // 2]))
    with pytest.raises(RawInputError, match=rf"train.csv: {kept:,} rows, {len(whole) // 2:,} bytes .*but the "
                                            rf"manifest lists {rows:,} rows, {len(whole):,} bytes.*Land the drop "
                                            "again") as error:
        run_prepare(spark, raw, str(tmp_path / "out"), AS_OF, num_shards=2)
    assert "store.csv" not in str(error.value)   # only the damaged file is named
    assert not storage.exists(str(tmp_path / "out" / "_SUCCESS"))


def test_a_drop_that_matches_its_manifest_is_recorded_as_verified(spark, tmp_path, drop):
    from rossmann_jobs.prepare import run_prepare

    raw, _ = landed_drop(tmp_path, drop)
    # The manifest's row counts are the rows each file was written with.
    listed = parse_manifest((tmp_path / "raw" / "_SUCCESS").read_bytes(), "_SUCCESS")
    assert {name: entry["rows"] for name, entry in listed.items()} == {name: len(rows) for name, rows in drop.items()}
    assert run_prepare(spark, raw, str(tmp_path / "out"), AS_OF, num_shards=2)["drop_verified"] is True
    (tmp_path / "raw" / "_SUCCESS").write_bytes(b"")   # Hadoop's own empty marker: accepted, unverified
    unverified = run_prepare(spark, raw, str(tmp_path / "out2"), AS_OF, num_shards=2)
    assert unverified["drop_verified"] is False and unverified["allow_unverified_drop"] is True
    # ... unless the deployment allows no unverified drop: refused before any Spark work, naming the setting.
    with pytest.raises(RawInputError, match=r"raw/_SUCCESS is empty or absent: the raw files are not verified "
                                            r"against a manifest, and this deployment allows no unverified drop "
                                            r"\(--no-allow-unverified-drop, the DAG param allow_unverified_drop\)"):
        run_prepare(spark, raw, str(tmp_path / "out3"), AS_OF, num_shards=2, allow_unverified_drop=False)
    assert not storage.exists(str(tmp_path / "out3" / "_SUCCESS"))


def test_a_file_landed_again_while_prepare_reads_the_drop_is_refused(tmp_path, drop):
    """prepare digests the files, Spark reads them, then they are digested again: a drop landed anew in between
    fails naming the file and both digests (the features would come from files nobody verified)."""
    from rossmann_jobs.features.drop_verification import check_unchanged_since_inspected, inspect_raw_files

    raw, contents = landed_drop(tmp_path, drop)
    inspected = inspect_raw_files(raw)
    check_unchanged_since_inspected(raw, inspected)   # unchanged: passes
    changed = contents["store.csv"].replace(b",a,", b",b,", 1)
    assert changed != contents["store.csv"]
    (tmp_path / "raw" / "store.csv").write_bytes(changed)
    now, size = storage.sha256(storage.join(raw, "store.csv"))
    with pytest.raises(RawInputError, match=rf"store\.csv changed while prepare read the drop \(store\.csv: SHA-256 "
                                            rf"{inspected['store.csv']['sha256']} .* when inspected, now {now} "
                                            rf"\({size:,} bytes\)\): the drop was landed again"):
        check_unchanged_since_inspected(raw, inspected)


def test_a_marker_that_is_neither_empty_nor_a_manifest_is_refused(tmp_path):
    assert parse_manifest(b" \n", "m") is None
    with pytest.raises(ValueError, match=r"raw/_SUCCESS: the drop marker is neither empty nor a rossmann-drop/1"):
        parse_manifest(b"done", "raw/_SUCCESS")
    with pytest.raises(ValueError, match="format 'other/2'"):
        parse_manifest(json.dumps({"format": "other/2", "files": {}}).encode(), "raw/_SUCCESS")
