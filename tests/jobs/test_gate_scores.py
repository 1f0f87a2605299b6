"""The train job's gate scores (gate_scores.py) in-process: challenger, champion with other vocabularies and
naive baseline on the same validation rows, each checked against an independent numpy/pandas computation."""
from __future__ import annotations

import math
from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest

from rossmann_jobs import storage
from rossmann_jobs.features.spec import FEATURE_COLS, LABEL_COL
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.model.store import open_model
from rossmann_jobs.model.trust import STORAGE_ROOT_ENV, encode_digests
from rossmann_jobs.output_layout import TRAIN_DIR, VALIDATION_DIR
from rossmann_jobs.training.feature_set import load_feature_set
from testkit.feature_fixtures import VOCAB_SIZES, write_features
from tests.jobs.predict_fixtures import commit_model

SMALL = TrainParams(hidden_units=(16, 8), embedding_dim=3)
VALIDATION_START = date(2015, 6, 15)


def redate(attempt: str, stage: str, first: date, days: int, seed: int) -> None:
    """Spread a fixture split's rows over `days` days from `first` (the fixture dates every row 2015-06-01)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    for uri in storage.list_files(storage.join(attempt, stage)):
        table = pq.read_table(uri)
        dates = [first + timedelta(days=int(offset)) for offset in rng.integers(0, days, table.num_rows)]
        table = table.set_column(table.schema.get_field_index("Date"), "Date", pa.array(dates, pa.date32()))
        pq.write_table(table, uri)


@pytest.fixture(scope="module")
def dated(tmp_path_factory):
    """Features whose train rows precede the validation window, as prepare writes them."""
    out = str(tmp_path_factory.mktemp("dated-features"))
    write_features(out, train_rows=3000, validation_rows=400, num_shards=2, seed=7)
    attempt = storage.committed_uri(out)
    redate(attempt, TRAIN_DIR, VALIDATION_START - timedelta(days=200), 200, seed=1)
    redate(attempt, VALIDATION_DIR, VALIDATION_START, 47, seed=2)
    return load_feature_set(out)


@pytest.fixture(scope="module")
def models(dated, tmp_path_factory):
    """A challenger model file, and a champion attempt holding the same function of the values under other
    vocabularies: its Store and Promo indices are reversed, so only re-indexed inputs reproduce the challenger."""
    import tensorflow as tf

    from rossmann_jobs.model.architecture import build_model

    root = str(tmp_path_factory.mktemp("root"))
    tf.keras.utils.set_random_seed(3)
    challenger = build_model(VOCAB_SIZES, dated.max_sales, SMALL)
    artifact = {"feature_order": FEATURE_COLS, "vocab_sizes": VOCAB_SIZES, "max_sales": dated.max_sales,
                "params": SMALL.to_dict(), "vocabularies": dated.metadata["vocabularies"]}
    challenger_out = storage.join(root, "runs", "2015-07-31", "r", "model")
    commit_model(challenger_out, challenger, artifact)

    champion = build_model(VOCAB_SIZES, dated.max_sales, SMALL)
    champion.set_weights(challenger.get_weights())
    vocabularies = {col: list(values) for col, values in dated.metadata["vocabularies"].items()}
    for col in ("Store", "Promo"):
        vocabularies[col] = vocabularies[col][::-1]            # value at feature index i -> champion index n + 1 - i
        layer = champion.get_layer(f"emb_{col}")
        weights = layer.get_weights()[0]
        layer.set_weights([np.concatenate([weights[:1], weights[1:][::-1]])])
    # The gate's pinned copy of a champion: an attempt with no manifest, its digests in the champion record.
    pinned, digests = commit_model(storage.join(root, "models", "champions", "2015-07-30", "r0"), champion,
                                   {**artifact, "vocabularies": vocabularies})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STORAGE_ROOT_ENV, root)
        yield {"challenger": challenger, "challenger_source": open_model(challenger_out), "champion": pinned,
               "champion_sha256": encode_digests(digests)}


def split_frame(features, stage: str):
    import pyarrow.parquet as pq

    files = features.train_files if stage == TRAIN_DIR else features.validation_files
    return pq.ParquetDataset(files).read().to_pandas()


def rmspe(actual: np.ndarray, forecast: np.ndarray) -> float:
    return math.sqrt(np.mean(((actual - forecast) / actual) ** 2))


def naive_baseline(history, rows, end: date) -> np.ndarray:
    """Median log(Sales) per (store, weekday, promo) over the year up to `end`, falling back as baseline.py says."""
    window = history[(history["Date"] > end - timedelta(days=365)) & (history["Date"] <= end)]
    medians = np.full(len(rows), np.nan)
    for keys in (["StoreId", "DayOfWeek", "Promo"], ["StoreId", "Promo"], ["StoreId"], []):
        if keys:
            level = window.groupby(keys)[LABEL_COL].median().rename("m").reset_index()
            found = rows[keys].merge(level, on=keys, how="left")["m"].to_numpy()
        else:
            found = np.full(len(rows), window[LABEL_COL].median())
        medians = np.where(np.isnan(medians), found, medians)
    return np.exp(medians)


def test_scores_are_the_same_rows_exp_rmspe_of_challenger_champion_and_baseline(spark, dated, models):
    from rossmann_jobs.gate_scores import gate_scores

    scores = gate_scores(spark, dated, models["challenger_source"], models["champion"], models["champion_sha256"])
    validation, train = split_frame(dated, VALIDATION_DIR), split_frame(dated, TRAIN_DIR)
    actual = np.exp(validation[LABEL_COL].to_numpy().astype(np.float64))
    inputs = {col: validation[col].to_numpy().reshape(-1, 1) for col in FEATURE_COLS}
    predicted = np.exp(models["challenger"].predict(inputs, verbose=0).ravel().astype(np.float64))
    end = VALIDATION_START - timedelta(days=1)

    assert scores["validation_rows"] == len(validation) == 400
    assert scores["challenger"] == pytest.approx(rmspe(actual, predicted), rel=1e-5)
    # The champion sees the rows re-indexed to its own vocabularies: the same function, the same score.
    assert scores["champion"] == pytest.approx(scores["challenger"], rel=1e-6)
    assert scores["champion_model_uri"] == models["champion"]
    assert scores["champion_remapped"] == ["Promo", "Store"]
    # The baseline is fitted on train rows before the validation window only.
    assert scores["baseline_history_end"] == end.isoformat()
    assert scores["baseline"] == pytest.approx(rmspe(actual, naive_baseline(train, validation, end)), rel=1e-6)
    leaky = naive_baseline(pd.concat([train, validation]), validation, validation["Date"].max())
    assert scores["baseline"] != pytest.approx(rmspe(actual, leaky), rel=1e-3)


def test_without_a_champion_only_challenger_and_baseline_are_scored(spark, dated, models):
    from rossmann_jobs.gate_scores import gate_scores

    scores = gate_scores(spark, dated, models["challenger_source"], "")
    assert scores["champion"] is None and scores["champion_model_uri"] is None
    assert math.isfinite(scores["challenger"]) and math.isfinite(scores["baseline"])


def test_no_history_before_the_validation_window_means_no_baseline_score(spark, models, tmp_path):
    from rossmann_jobs.gate_scores import gate_scores

    write_features(str(tmp_path), train_rows=200, validation_rows=50, num_shards=1)   # every row on one day
    scores = gate_scores(spark, load_feature_set(str(tmp_path)), models["challenger_source"], None)
    assert scores["baseline"] is None and scores["validation_rows"] == 50 and math.isfinite(scores["challenger"])


def test_the_baseline_window_ends_before_the_validation_window_prepare_recorded(spark, dated):
    """Read from metadata.json without a query; features without the record fall back to the first row's date."""
    import dataclasses

    from rossmann_jobs.gate_scores import validation_window_start
    from rossmann_jobs.training.prepared_files import read_files

    validation = read_files(spark, dated.validation_files)
    recorded = dataclasses.replace(dated, metadata={**dated.metadata,
                                                    "validation_window": {"start": "2015-06-01", "end": "2015-07-31"}})
    assert validation_window_start(recorded, None) == date(2015, 6, 1)
    unrecorded = dataclasses.replace(dated, metadata={k: v for k, v in dated.metadata.items()
                                                      if k != "validation_window"})
    assert validation_window_start(unrecorded, validation) == VALIDATION_START
