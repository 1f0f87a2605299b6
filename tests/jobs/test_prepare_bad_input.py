"""Bad raw drops: each problem fails with an error naming file, column and example rows, or is quarantined."""
from __future__ import annotations

import json
from datetime import date

import pytest

from fixtures.tiny_drop import csv_text, tiny_drop, write_drop
from rossmann_jobs import storage
from rossmann_jobs.features.validate import RawInputError

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
    text = without_column("train.csv", drop["train.csv"], "Customers")
    with pytest.raises(RawInputError, match=r"train.csv: unexpected header .*missing columns \['Customers'\], "
                                            r"extra columns \[\]"):
        run(spark, tmp_path, drop, overrides={"train.csv": text})


def test_extra_column(spark, tmp_path, drop):
    rows = [{**r, "Comment": "x"} for r in drop["store.csv"]]
    text = csv_text("store.csv", rows, header=list(rows[0]))
    with pytest.raises(RawInputError, match=r"store.csv: unexpected header .*extra columns \['Comment'\]"):
        run(spark, tmp_path, drop, overrides={"store.csv": text})


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
    unseen_test_store(drop)
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
        ("test.csv", "Store has no train.csv rows on or before as-of", "Store"): 1,
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
