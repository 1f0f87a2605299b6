"""Tiny contract-conforming inputs for predict tests: a committed features output and a committed model."""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from datetime import date, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rossmann_jobs import storage
from rossmann_jobs.features.spec import CATEGORICAL_COLS, CONTINUOUS_COLS, FEATURE_COLS, LABEL_COL
from rossmann_jobs.model import files as model_files
from rossmann_jobs.model.architecture import build_model as build_network
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.model.trust import DIGESTS_KEY
from rossmann_jobs.output_layout import METADATA_FILE, TEST_DIR, TRAIN_DIR, VALIDATION_DIR

STORE_IDS = [1, 3, 7, 12, 25, 40]     # non-contiguous, so a raw id used as an index would show
MAX_SALES = 20000.0
VALIDATION_START, TEST_START = date(2014, 8, 1), date(2015, 8, 1)


@dataclass
class FeaturesFixture:
    uri: str
    test: pd.DataFrame
    validation: pd.DataFrame
    vocabularies: dict[str, list] = field(default_factory=dict)
    train: pd.DataFrame | None = None


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

    def grid(start):
        return pd.DataFrame([(s, start + timedelta(days=d)) for d in range(days) for s in STORE_IDS],
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


def make_train(starts: tuple[date, ...] = (VALIDATION_START - timedelta(days=40), TEST_START - timedelta(days=20)),
               days: int = 7, seed: int = 1) -> pd.DataFrame:
    """Train rows in the prepared schema: one week from each start (the default: one before the baseline's 365-day
    window of the fixture's as-of date, one inside it)."""
    rng = np.random.default_rng(seed)
    train = pd.DataFrame([(s, start + timedelta(days=d)) for start in starts for d in range(days) for s in STORE_IDS],
                         columns=["StoreId", "Date"])
    train = pd.concat([train, _feature_block(rng, train, vocabularies())], axis=1)
    train[LABEL_COL] = np.log(rng.uniform(2000, 12000, size=len(train))).astype(np.float32)
    train["StoreId"] = train["StoreId"].astype(np.int32)
    return train


def write_parquet_parts(frame: pd.DataFrame, uri: str, parts: int = 2, schema: pa.Schema | None = None) -> None:
    for index, chunk in enumerate(np.array_split(np.arange(len(frame)), parts)):
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pandas(frame.iloc[chunk], schema=schema, preserve_index=False), buffer)
        storage.write_bytes(storage.join(uri, f"part-{index:05d}.parquet"), buffer.getvalue())


def write_features(out_uri: str, test: pd.DataFrame, validation: pd.DataFrame,
                   vocabs: dict[str, list] | None = None, train: pd.DataFrame | None = None,
                   input_checksums: dict | None = None) -> FeaturesFixture:
    """Commit train/validation/test Parquet + metadata.json under out_uri as the prepare job would (train: none by
    default; input_checksums: the raw files' {name: {sha256, bytes}}, none by default)."""
    vocabs = vocabs or vocabularies()
    attempt = storage.new_attempt_uri(out_uri)
    write_parquet_parts(test, storage.join(attempt, TEST_DIR))
    write_parquet_parts(validation, storage.join(attempt, VALIDATION_DIR))
    write_parquet_parts(validation.head(0) if train is None else train, storage.join(attempt, TRAIN_DIR), parts=1,
                        schema=pa.Schema.from_pandas(validation, preserve_index=False))
    metadata = {
        "feature_spec": {"categorical": [{"name": c, "vocab_size": len(vocabs[c]) + 1} for c in CATEGORICAL_COLS],
                         "continuous": list(CONTINUOUS_COLS), "label": LABEL_COL},
        "vocabularies": vocabs, "max_sales": MAX_SALES,
        "row_counts": {"test": len(test), "validation": len(validation)},
        "as_of": str(TEST_START - timedelta(days=1)),
        "validation_window": {"start": str(validation["Date"].min()), "end": str(validation["Date"].max())},
        "test_window": {"start": str(test["Date"].min()), "end": str(test["Date"].max())},
        "input_checksums": input_checksums or {}, "num_shards": 2,
    }
    storage.write_json(storage.join(attempt, METADATA_FILE), metadata)
    storage.commit(out_uri, attempt, {"rows": metadata["row_counts"]})
    return FeaturesFixture(out_uri, test, validation, vocabs,
                           train=validation.head(0) if train is None else train)


def write_raw_test(raw_uri: str, test: pd.DataFrame) -> str:
    """The drop's test.csv for a prepared test frame (the raw header; only Id matters to predict); returns raw_uri."""
    raw = pd.DataFrame({"Id": test["Id"], "Store": test["StoreId"], "DayOfWeek": [d.isoweekday() for d in test["Date"]],
                        "Date": [d.isoformat() for d in test["Date"]], "Open": test["Open"], "Promo": 0,
                        "StateHoliday": "0", "SchoolHoliday": 0})
    storage.write_bytes(storage.join(raw_uri, "test.csv"), raw.to_csv(index=False).encode("utf-8"))
    return raw_uri


def expected_baseline(history: pd.DataFrame, rows: pd.DataFrame, end: date, days: int = 365) -> pd.Series:
    """The naive seasonal baseline computed independently with pandas: exp(median log Sales) of the most specific
    of (store, day of week, promo), (store, promo), (store), all rows with history in (end - days, end]."""
    window = history[(history["Date"] > end - timedelta(days=days)) & (history["Date"] <= end)]
    out = pd.Series(np.nan, index=rows.index)
    for keys in (["StoreId", "DayOfWeek", "Promo"], ["StoreId", "Promo"], ["StoreId"]):
        medians = window.groupby(keys)[LABEL_COL].median().rename("m").reset_index()
        found = rows[keys].merge(medians, on=keys, how="left")["m"].to_numpy()
        out = out.fillna(pd.Series(found, index=rows.index))
    return np.exp(out.fillna(window[LABEL_COL].median()).astype(float))


FIXTURE_PARAMS = TrainParams(hidden_units=(16,), embedding_dim=3)


def build_model(vocabs: dict[str, list], seed: int = 7):
    """A small model built as the train job builds it (model/architecture.py), so predict can rebuild it from its
    artifact: embeddings + batch-normalised continuous -> dense -> scaled sigmoid."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    return build_network({c: len(vocabs[c]) + 1 for c in CATEGORICAL_COLS}, MAX_SALES, FIXTURE_PARAMS)


def model_artifact(vocabs: dict[str, list], features_uri: str = "") -> dict:
    return {"feature_order": FEATURE_COLS, "vocab_sizes": {c: len(vocabs[c]) + 1 for c in CATEGORICAL_COLS},
            "vocabularies": vocabs, "max_sales": MAX_SALES, "label_transform": "log", "features_uri": features_uri,
            "trained_at": "2015-07-31T00:00:00+00:00", "horovod_size": 2, "best_val_exp_rmspe": 0.5,
            "params": FIXTURE_PARAMS.to_dict()}


def commit_model(out_uri: str, model, artifact: dict) -> tuple[str, dict]:
    """Commit a model attempt (artifact.json + weights.npz) under out_uri as the train job does, the digests in its
    manifest; returns (the attempt, the digests)."""
    attempt = storage.new_attempt_uri(out_uri)
    digests = model_files.write_model(attempt, artifact, model_files.weights_bytes(model))
    storage.commit(out_uri, attempt, {DIGESTS_KEY: digests})
    return attempt, digests


def write_model(out_uri: str, vocabs: dict[str, list] | None = None, features_uri: str = "", model=None) -> dict:
    """Commit model/artifact.json + model/weights.npz + metrics.json under out_uri, the digests in the manifest
    (as the train job does); returns the digests."""
    vocabs = vocabs or vocabularies()
    model = model or build_model(vocabs)
    attempt = storage.new_attempt_uri(out_uri)
    digests = model_files.write_model(attempt, model_artifact(vocabs, features_uri), model_files.weights_bytes(model))
    history = [{"epoch": e, "train_loss": 1.0 / e, "val_loss": 1.2 / e, "train_exp_rmspe": 0.4 / e,
                "val_exp_rmspe": 0.5 / e} for e in (1, 2)]
    storage.write_json(storage.join(attempt, "metrics.json"), {
        "best_epoch": 2, "horovod_size": 2, "epochs": history,
        "gate_scores": {"challenger": 0.25, "champion": None, "baseline": 0.3, "validation_rows": 100,
                        "champion_model_uri": None}})
    storage.commit(out_uri, attempt, {DIGESTS_KEY: digests})
    return digests
