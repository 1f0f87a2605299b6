"""Raw drops as other tools export them (tests/jobs/export_variants.py), derived from a generated clean drop: the same
values written another way give the clean drop's features; a changed meaning, or a file that is not one, is refused
naming the file and the column."""
from __future__ import annotations

from datetime import date

import pandas as pd
import pytest

from export_variants import REFUSED, SAME, Refused, combined, expected_report, read_drop, read_table, write_drop
from rossmann_jobs.features.raw_schemas import RAW_FILES
from rossmann_jobs.features.validate import PROBLEM, RawInputError, parse_columns, parse_header, read_text_csv
from testkit.feature_fixtures import committed_split_frames

STORES, SEED = 10, 11
AS_OF = date(2015, 7, 31)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict[str, bytes]:
    from rossmann_jobs.synth.cli import generate
    from rossmann_jobs.synth.dataset import SynthConfig

    raw = str(tmp_path_factory.mktemp("clean") / "raw")
    generate(raw, SynthConfig(stores=STORES, seed=SEED))
    return read_drop(raw, RAW_FILES)


def prepare(spark, folder, files, **kwargs):
    from rossmann_jobs.prepare import run_prepare

    raw = write_drop(str(folder / "raw"), files)
    return run_prepare(spark, raw, str(folder / "out"), AS_OF, num_shards=2, **kwargs)


@pytest.fixture(scope="module")
def clean_prepared(spark, clean, tmp_path_factory):
    folder = tmp_path_factory.mktemp("clean-prepared")
    return prepare(spark, folder, clean), committed_split_frames(str(folder / "out"))


def test_every_kind_of_variant_is_there():
    assert len(SAME) >= 10 and len(REFUSED) >= 5
    assert {v.expect.before_spark for v in REFUSED} == {True, False}


@pytest.mark.parametrize("variant", SAME, ids=lambda v: v.name)
def test_a_variant_written_another_way_parses_as_the_clean_file(spark, clean, tmp_path, variant):
    """Each file the variant changes is read as the clean file is: the same typed rows, no problem."""
    changed = variant.change(clean)
    for name, data in changed.items():
        raw_file = RAW_FILES[name]
        frames = []
        for label, content in (("clean", clean[name]), ("variant", data)):
            path = tmp_path / label / name
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(content)
            header = parse_header(raw_file, content[:65536])
            parsed = parse_columns(read_text_csv(spark, str(path), raw_file, header), raw_file, fields=len(header))
            frames.append(parsed.toPandas())
        expected, got = frames
        assert got[PROBLEM].isna().all(), got[got[PROBLEM].notna()][PROBLEM].head(3).tolist()
        absent = variant.expect.report.get(name, {}).get("absent", [])   # read as missing: no feature reads them
        assert got[absent].isna().all().all()
        pd.testing.assert_frame_equal(got.drop(columns=absent), expected.drop(columns=absent))


@pytest.mark.slow
def test_all_variants_written_another_way_in_one_drop_give_the_clean_features(spark, clean, clean_prepared,
                                                                              tmp_path):
    metadata, splits = clean_prepared
    drop = combined(SAME, clean)
    assert all(drop[name] != clean[name] for name in ("train.csv", "test.csv", "store.csv", "weather.csv"))
    got = prepare(spark, tmp_path, drop)
    for key in ("feature_spec", "vocabularies", "max_sales", "row_counts", "validation_window", "test_window"):
        assert got[key] == metadata[key], key
    assert got["input_columns"] == expected_report(SAME) and metadata["input_columns"] == {}
    for name, frame in committed_split_frames(str(tmp_path / "out")).items():
        assert len(frame) > 0
        pd.testing.assert_frame_equal(frame, splits[name])


@pytest.mark.slow
def test_an_unused_column_that_does_not_parse_is_reported_not_refused(spark, clean, clean_prepared, tmp_path):
    """Customers feeds no feature: values that are not numbers are read as missing and counted, the features are
    the clean drop's."""
    metadata, splits = clean_prepared
    table = read_table(clean["train.csv"])
    at = table.column("Customers")
    rows = [[*row[:at], "n/a" if n % 2 else "-1", *row[at + 1:]] for n, row in enumerate(table.rows)]
    from export_variants import Table, write_table

    got = prepare(spark, tmp_path, {**clean, "train.csv": write_table(Table(table.header, rows))})
    assert got["input_columns"] == {"train.csv": {"unused_without_value": {"Customers": len(rows)}}}
    assert got["row_counts"] == metadata["row_counts"]
    for name, frame in committed_split_frames(str(tmp_path / "out")).items():
        pd.testing.assert_frame_equal(frame, splits[name])


@pytest.mark.parametrize("variant", [v for v in REFUSED if v.expect.before_spark], ids=lambda v: v.name)
def test_a_file_that_is_not_the_drops_is_refused_before_any_spark_work(clean, tmp_path, variant):
    from rossmann_jobs.features.drop_verification import inspect_raw_files

    raw = write_drop(str(tmp_path / "raw"), {**clean, **variant.change(clean)})
    with pytest.raises(RawInputError) as error:
        inspect_raw_files(raw)
    check_refusal(str(error.value), variant.expect)


@pytest.mark.slow
@pytest.mark.parametrize("variant", [v for v in REFUSED if not v.expect.before_spark], ids=lambda v: v.name)
def test_a_column_that_does_not_parse_is_refused_as_such_before_freshness(spark, clean, tmp_path, variant):
    """Every train.csv row fails on one column: the error names the column and the values' pattern, not the empty
    drop that the freshness check would see."""
    with pytest.raises(RawInputError) as error:
        prepare(spark, tmp_path, {**clean, **variant.change(clean)})
    check_refusal(str(error.value), variant.expect)
    assert "no row is dated" not in str(error.value)


def check_refusal(message: str, expect: Refused) -> None:
    assert message.startswith(f"{expect.file}: "), message
    if expect.column:
        assert f"'{expect.column}'" in message, message
    for text in expect.also:
        assert text in message, message


def test_the_spark_folder_is_a_bad_input_failure_not_a_retry(clean, tmp_path):
    """A folder where a file belongs is a known bad input (prepare's exit status 2, not retried), not an OSError."""
    from export_variants import spark_part_files
    from rossmann_jobs.features.drop_verification import inspect_raw_files

    raw = write_drop(str(tmp_path / "raw"), {**clean, **spark_part_files("train.csv")(clean)})
    with pytest.raises(RawInputError) as error:
        inspect_raw_files(raw)
    assert not isinstance(error.value, OSError)


def test_predict_and_score_read_an_exported_drop_as_prepare_does(spark, clean, tmp_path):
    """predict re-reads test.csv's Ids and score train.csv's actuals: by header name, with the same tolerance."""
    from export_variants import BY_NAME, edit, reordered
    from rossmann_jobs.forecast.predict_inputs import read_raw_test_ids
    from rossmann_jobs.score import read_actuals

    train_variants = [BY_NAME[name] for name in ("train Open written True/False (pandas bool)",
                                                 "train Sales and Store written as floats",
                                                 "train.csv with pandas' index column")]
    variant = {**combined(train_variants, clean), **edit("test.csv", reordered)(clean)}
    raws = {label: write_drop(str(tmp_path / label), files)
            for label, files in (("clean", clean), ("variant", variant))}
    ids = {label: read_raw_test_ids(spark, raw)[0].sort_values("Id", ignore_index=True) for label, raw in raws.items()}
    pd.testing.assert_frame_equal(ids["variant"], ids["clean"])
    actuals = {label: read_actuals(spark, raw, date(2015, 6, 30), AS_OF).toPandas().sort_values(
        ["StoreId", "Date"], ignore_index=True) for label, raw in raws.items()}
    assert len(actuals["clean"]) > 0
    pd.testing.assert_frame_equal(actuals["variant"], actuals["clean"])
