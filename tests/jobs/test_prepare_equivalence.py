"""The prepare job's features equal the reference (Horovod's example) row for row on generated data (its columns).

Its columns but the Before<Event> counts (spec.UNFED_BEFORE_COLS), which the model is not fed and prepare neither
computes nor writes (testkit/horovod_reference.py computes them the reference's way)."""
from __future__ import annotations

import math
from datetime import date

import numpy as np
import pandas as pd
import pytest

from rossmann_jobs import storage
from rossmann_jobs.features import point_in_time, split
from rossmann_jobs.features.spec import REFERENCE_CATEGORICAL_COLS, REFERENCE_CONTINUOUS_COLS, UNFED_BEFORE_COLS
from rossmann_jobs.output_layout import METADATA_FILE

pytestmark = pytest.mark.slow

STORES, SEED = 8, 11
LAST_TRAIN_DAY = date(2015, 7, 31)   # the generator's train.csv ends here: as-of = the reference's view of everything


@pytest.fixture(scope="module")
def raw_dir(tmp_path_factory):
    from rossmann_jobs.synth.cli import generate
    from rossmann_jobs.synth.dataset import SynthConfig

    out = str(tmp_path_factory.mktemp("synth") / "raw")
    generate(out, SynthConfig(stores=STORES, seed=SEED))
    return out


@pytest.fixture(scope="module")
def ours(spark, raw_dir, tmp_path_factory):
    from rossmann_jobs.prepare import run_prepare

    out = str(tmp_path_factory.mktemp("prepared"))
    # The reference's joins (a trend week ending after as-of, the horizon's own weather): the reference's features.
    # The reference validates on the horizon a year earlier and has no origin features (compared: its columns).
    metadata = run_prepare(spark, raw_dir, out, LAST_TRAIN_DAY, num_shards=2,
                           point_in_time_mode=point_in_time.REFERENCE, validation_rule=split.YEAR_EARLIER)
    assert metadata["point_in_time"]["mode"] == point_in_time.REFERENCE
    attempt = storage.committed_uri(out)
    assert storage.read_json(storage.join(attempt, METADATA_FILE)) == metadata
    splits = {name: pd.read_parquet(storage.join(attempt, name)) for name in ("train", "validation", "test")}
    return metadata, splits


@pytest.fixture(scope="module")
def reference(spark, raw_dir):
    from testkit.horovod_reference import data_preparation

    max_sales, vocab, train_df, test_df = data_preparation(spark, raw_dir)
    return max_sales, vocab, train_df.toPandas(), test_df.toPandas()


def _normal(value):
    """One spelling for the reference's text values and our typed ones ("5" == 5, "1900" == 1900)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


def _decode_ours(frame: pd.DataFrame, vocabularies: dict) -> pd.DataFrame:
    decoded = frame.copy()
    for col in REFERENCE_CATEGORICAL_COLS:
        values = [None, *vocabularies[col]]
        decoded[col] = [_normal(values[i]) for i in frame[col]]
    return decoded


def _decode_reference(frame: pd.DataFrame, vocab: dict) -> pd.DataFrame:
    decoded = frame.copy()
    for col in REFERENCE_CATEGORICAL_COLS:
        decoded[col] = [_normal(vocab[col][i]) for i in frame[col]]
    return decoded


def _assert_same_features(mine: pd.DataFrame, theirs: pd.DataFrame, key: list[str]) -> None:
    assert len(mine) == len(theirs)
    merged = mine.merge(theirs, on=key, suffixes=("_ours", "_ref"), how="outer", indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"].head()
    for col in REFERENCE_CATEGORICAL_COLS:
        if col in key:
            continue
        a, b = merged[f"{col}_ours"].astype(object), merged[f"{col}_ref"].astype(object)
        differ = merged[~((a == b) | (a.isna() & b.isna()))]
        assert differ.empty, (col, differ[[*key, f"{col}_ours", f"{col}_ref"]].head())
    for col in [col for col in REFERENCE_CONTINUOUS_COLS if col not in UNFED_BEFORE_COLS]:
        np.testing.assert_allclose(merged[f"{col}_ours"].astype(float), merged[f"{col}_ref"].astype(float),
                                   rtol=1e-6, err_msg=col)


def test_train_and_validation_rows_equal_the_reference(ours, reference):
    metadata, splits = ours
    _max_sales, vocab, ref_train, _ref_test = reference
    mine = pd.concat([splits["train"].assign(Validation=False), splits["validation"].assign(Validation=True)])
    mine = _decode_ours(mine, metadata["vocabularies"])
    theirs = _decode_reference(ref_train, vocab)
    theirs["Date"] = pd.to_datetime(theirs["Date"]).dt.date
    mine["Date"] = pd.to_datetime(mine["Date"]).dt.date
    # Our Store feature decodes to the raw store number, which must also equal StoreId.
    assert (mine["Store"] == mine["StoreId"]).all()
    _assert_same_features(mine, theirs, ["Store", "Date"])
    merged = mine.merge(theirs, on=["Store", "Date"], suffixes=("_ours", "_ref"))
    assert (merged["Validation_ours"] == merged["Validation_ref"]).all()
    np.testing.assert_allclose(merged["Sales_ours"], merged["Sales_ref"], rtol=1e-6)


def test_test_rows_equal_the_reference(ours, reference):
    metadata, splits = ours
    _max_sales, vocab, _ref_train, ref_test = reference
    mine = _decode_ours(splits["test"], metadata["vocabularies"])
    theirs = _decode_reference(ref_test, vocab)
    theirs["Id"] = theirs["Id"].astype(int)
    _assert_same_features(mine.drop(columns=["Date"]), theirs.drop(columns=["Date"]), ["Id"])


def test_max_sales_and_vocabularies_match_the_reference(ours, reference):
    metadata, _splits = ours
    max_sales, vocab, _ref_train, _ref_test = reference
    assert metadata["max_sales"] == pytest.approx(float(max_sales))
    for col in REFERENCE_CATEGORICAL_COLS:
        theirs = sorted((_normal(v) for v in vocab[col] if v is not None), key=repr)
        assert sorted((_normal(v) for v in metadata["vocabularies"][col]), key=repr) == theirs, col
