"""Tiny contract-conforming inputs for predict tests: a committed features output and a committed Keras model."""
from __future__ import annotations

import io
import math
import os
import tempfile
from dataclasses import dataclass, field
from datetime import date, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rossmann_jobs import storage
from rossmann_jobs.features.spec import (CATEGORICAL_COLS, CONTINUOUS_COLS, FEATURE_COLS, LABEL_COL, METADATA_FILE,
                                         TEST_DIR, TRAIN_DIR, VALIDATION_DIR)

STORE_IDS = [1, 3, 7, 12, 25, 40]     # non-contiguous, so a raw id used as an index would show
MAX_SALES = 20000.0
VALIDATION_START, TEST_START = date(2014, 8, 1), date(2015, 8, 1)


@dataclass
class FeaturesFixture:
    uri: str
    test: pd.DataFrame
    validation: pd.DataFrame
    vocabularies: dict[str, list] = field(default_factory=dict)


def vocabularies() -> dict[str, list]:
    """Small known-value lists; index i + 1 encodes the i-th value, 0 is unknown."""
    vocabs = {column: [f"{column.lower()}_{i}" for i in range(3)] for column in CATEGORICAL_COLS}
    vocabs["Store"] = list(STORE_IDS)
    vocabs["DayOfWeek"] = list(range(1, 8))
    return vocabs


def _feature_block(rng: np.random.Generator, rows: pd.DataFrame, vocabs: dict[str, list]) -> pd.DataFrame:
    block = {}
    for column in CATEGORICAL_COLS:
        block[column] = rng.integers(0, len(vocabs[column]) + 1, size=len(rows)).astype(np.int32)
    block["Store"] = np.array([vocabs["Store"].index(s) + 1 for s in rows["StoreId"]], dtype=np.int32)
    block["DayOfWeek"] = np.array([d.isoweekday() for d in rows["Date"]], dtype=np.int32)
    for column in CONTINUOUS_COLS:
        block[column] = rng.normal(0.0, 1.0, size=len(rows)).astype(np.float32)
    return pd.DataFrame(block, index=rows.index)


def make_frames(days: int = 6, seed: int = 0, blank_open: int = 2) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(test, validation) frames in the prepared schema; test Ids are shuffled, Sundays closed, a few Open blank."""
    rng = np.random.default_rng(seed)
    vocabs = vocabularies()
    grid = lambda start: pd.DataFrame([(s, start + timedelta(days=d)) for d in range(days) for s in STORE_IDS],
                                      columns=["StoreId", "Date"])
    test = grid(TEST_START)
    test.insert(0, "Id", rng.permutation(len(test)).astype(np.int32) + 1)
    open_flags = pd.array([0 if d.isoweekday() == 7 else 1 for d in test["Date"]], dtype="Int32")
    open_flags[rng.choice(np.flatnonzero(open_flags == 1), size=blank_open, replace=False)] = pd.NA
    test["Open"] = open_flags
    test = pd.concat([test, _feature_block(rng, test, vocabs)], axis=1)
    validation = grid(VALIDATION_START)
    validation = pd.concat([validation, _feature_block(rng, validation, vocabs)], axis=1)
    validation[LABEL_COL] = np.log(rng.uniform(2000, 12000, size=len(validation))).astype(np.float32)
    for frame in (test, validation):
        frame["StoreId"] = frame["StoreId"].astype(np.int32)
    return test, validation


def write_parquet_parts(frame: pd.DataFrame, uri: str, parts: int = 2) -> None:
    for index, chunk in enumerate(np.array_split(np.arange(len(frame)), parts)):
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pandas(frame.iloc[chunk], preserve_index=False), buffer)
        storage.write_bytes(storage.join(uri, f"part-{index:05d}.parquet"), buffer.getvalue())


def write_features(out_uri: str, test: pd.DataFrame, validation: pd.DataFrame,
                   vocabs: dict[str, list] | None = None) -> FeaturesFixture:
    """Commit test/validation Parquet + metadata.json under out_uri as the prepare job would."""
    vocabs = vocabs or vocabularies()
    attempt = storage.new_attempt_uri(out_uri)
    write_parquet_parts(test, storage.join(attempt, TEST_DIR))
    write_parquet_parts(validation, storage.join(attempt, VALIDATION_DIR))
    write_parquet_parts(validation.head(0), storage.join(attempt, TRAIN_DIR), parts=1)
    metadata = {
        "feature_spec": {"categorical": [{"name": c, "vocab_size": len(vocabs[c]) + 1} for c in CATEGORICAL_COLS],
                         "continuous": list(CONTINUOUS_COLS), "label": LABEL_COL},
        "vocabularies": vocabs, "max_sales": MAX_SALES,
        "row_counts": {"test": len(test), "validation": len(validation)},
        "as_of": str(TEST_START - timedelta(days=1)),
        "validation_window": [str(validation["Date"].min()), str(validation["Date"].max())],
        "test_window": [str(test["Date"].min()), str(test["Date"].max())],
        "input_checksums": {}, "num_shards": 2,
    }
    storage.write_json(storage.join(attempt, METADATA_FILE), metadata)
    storage.commit(out_uri, attempt, {"rows": metadata["row_counts"]})
    return FeaturesFixture(out_uri, test, validation, vocabs)


def build_model(vocabs: dict[str, list], seed: int = 7):
    """A small model with the reference's shape: embeddings + batch-normalised continuous -> dense -> scaled sigmoid."""
    import tensorflow as tf

    layers = tf.keras.layers
    tf.keras.utils.set_random_seed(seed)
    inputs = {c: layers.Input(shape=(1,), name=c) for c in FEATURE_COLS}
    embedded = [layers.Embedding(len(vocabs[c]) + 1, 3, name=f"emb_{c}")(inputs[c]) for c in CATEGORICAL_COLS]
    continuous = layers.Concatenate()([layers.Reshape((1, 1))(inputs[c]) for c in CONTINUOUS_COLS])
    hidden = layers.Flatten()(layers.Concatenate()(embedded + [layers.BatchNormalization()(continuous)]))
    hidden = layers.Dense(16, activation="relu")(hidden)
    output = layers.Rescaling(math.log(MAX_SALES) * 1.2)(layers.Dense(1, activation="sigmoid")(hidden))
    return tf.keras.Model([inputs[c] for c in FEATURE_COLS], output)


def write_model(out_uri: str, vocabs: dict[str, list] | None = None, features_uri: str = "", model=None) -> str:
    """Commit model/model.h5 + model/artifact.json + metrics.json under out_uri; returns the model.h5 local copy."""
    vocabs = vocabs or vocabularies()
    model = model or build_model(vocabs)
    local = os.path.join(tempfile.mkdtemp(prefix="predict-fixture-"), "model.h5")
    model.save(local)
    attempt = storage.new_attempt_uri(out_uri)
    with open(local, "rb") as handle:
        storage.write_bytes(storage.join(attempt, "model", "model.h5"), handle.read())
    storage.write_json(storage.join(attempt, "model", "artifact.json"), {
        "feature_order": FEATURE_COLS, "vocab_sizes": {c: len(vocabs[c]) + 1 for c in CATEGORICAL_COLS},
        "vocabularies": vocabs, "max_sales": MAX_SALES, "label_transform": "log", "features_uri": features_uri,
        "trained_at": "2015-07-31T00:00:00+00:00", "horovod_size": 2, "best_val_exp_rmspe": 0.5,
    })
    storage.write_json(storage.join(attempt, "metrics.json"), {"best_epoch": 1, "horovod_size": 2})
    storage.commit(out_uri, attempt, {})
    return local
