"""Small prepared-features datasets that follow the prepare job's contract (spec.py), committed with storage.commit."""
from __future__ import annotations

from typing import Any

import numpy as np

from rossmann_jobs import storage
from rossmann_jobs.features.spec import CATEGORICAL_COLS, CONTINUOUS_COLS, LABEL_COL, STORE_ID_COL
from rossmann_jobs.output_layout import METADATA_FILE, TRAIN_DIR, VALIDATION_DIR

VOCAB_SIZES = {col: 4 for col in CATEGORICAL_COLS} | {"Store": 21, "DayOfWeek": 8, "Promo": 3}


def feature_table(rows: int, rng: np.random.Generator):
    """A learnable toy: log(Sales) depends on Store, DayOfWeek, Promo and one continuous column, plus noise."""
    import pyarrow as pa

    columns: dict[str, Any] = {}
    for col in CATEGORICAL_COLS:
        columns[col] = rng.integers(1, VOCAB_SIZES[col], rows).astype(np.int32)
    for col in CONTINUOUS_COLS:
        columns[col] = rng.normal(0, 1, rows).astype(np.float32)
    store_effect = np.linspace(-0.5, 0.5, VOCAB_SIZES["Store"])
    log_sales = (8.5 + store_effect[columns["Store"]] + 0.05 * columns["DayOfWeek"] + 0.2 * (columns["Promo"] == 2)
                 + 0.1 * columns["CompetitionDistance"] + rng.normal(0, 0.05, rows))
    columns[LABEL_COL] = log_sales.astype(np.float32)
    columns[STORE_ID_COL] = (columns["Store"] + 1000).astype(np.int32)
    columns["Date"] = np.full(rows, np.datetime64("2015-06-01"), dtype="datetime64[D]")
    return pa.table(columns)


def write_features(out_uri: str, train_rows: int = 2000, validation_rows: int = 400, num_shards: int = 4,
                   seed: int = 0) -> dict[str, Any]:
    """Write train/ and validation/ as num_shards near-equal Parquet files plus metadata.json; commit; return it."""
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    attempt = storage.new_attempt_uri(out_uri)
    tables = {TRAIN_DIR: feature_table(train_rows, rng), VALIDATION_DIR: feature_table(validation_rows, rng)}
    for stage, table in tables.items():
        bounds = np.linspace(0, table.num_rows, num_shards + 1).astype(int)
        for shard, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
            filesys, path = storage.filesystem(storage.join(attempt, stage, f"part-{shard:05d}.parquet"))
            if not storage.is_s3(out_uri):
                filesys.create_dir(path.rsplit("/", 1)[0], recursive=True)
            pq.write_table(table.slice(start, stop - start), path, filesystem=filesys)
    max_log_sales = max(float(np.max(t[LABEL_COL].to_numpy())) for t in tables.values())
    metadata = {
        "feature_spec": {"categorical": [{"name": col, "vocab_size": VOCAB_SIZES[col]} for col in CATEGORICAL_COLS],
                         "continuous": CONTINUOUS_COLS, "label": LABEL_COL},
        "vocabularies": {col: [f"{col}-{i}" for i in range(1, VOCAB_SIZES[col])] for col in CATEGORICAL_COLS},
        "max_sales": float(np.exp(max_log_sales)),
        "row_counts": {TRAIN_DIR: train_rows, VALIDATION_DIR: validation_rows},
        "num_shards": num_shards,
        "as_of": "2015-07-31",
    }
    storage.write_json(storage.join(attempt, METADATA_FILE), metadata)
    storage.commit(out_uri, attempt, {"fixture": True})
    return metadata


def committed_split_frames(out: str) -> dict[str, Any]:
    """The train, validation and test splits of a committed prepare output as pandas frames, in (StoreId, Date)
    order: two prepare runs compare frame by frame."""
    import pandas as pd

    attempt = storage.committed_uri(out)
    return {name: pd.read_parquet(storage.join(attempt, name)).sort_values(["StoreId", "Date"], ignore_index=True)
            for name in ("train", "validation", "test")}
