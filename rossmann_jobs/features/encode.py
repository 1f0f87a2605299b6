"""Vocabularies and the model encoding: categorical -> int32 index (0 = unknown), continuous -> float32, log label."""
from __future__ import annotations

from itertools import chain
from typing import Any, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.features import split
from rossmann_jobs.features.spec import (CATEGORICAL_COLS, CONTINUOUS_COLS, FEATURE_COLS, LABEL_COL, STORE_ID_COL,
                                         TEST_DIR, TRAIN_DIR, UNKNOWN_INDEX, VALIDATION_DIR)

SPLIT_COLUMNS = {
    TRAIN_DIR: [STORE_ID_COL, "Date", *FEATURE_COLS, LABEL_COL],
    VALIDATION_DIR: [STORE_ID_COL, "Date", *FEATURE_COLS, LABEL_COL],
    TEST_DIR: ["Id", STORE_ID_COL, "Date", "Open", *FEATURE_COLS],
}


def sorted_vocabularies(value_sets: Mapping[str, list]) -> dict[str, list]:
    """Sorted known values per column; value i (0-based) gets index i + 1, index 0 is unknown/missing."""
    return {col: sorted(value_sets[col]) for col in CATEGORICAL_COLS}


def vocab_sizes(vocabularies: Mapping[str, list]) -> dict[str, int]:
    return {col: len(values) + 1 for col, values in vocabularies.items()}


def _index_of(col: str, values: list[Any]):
    if not values:
        return F.lit(UNKNOWN_INDEX)
    mapping = F.create_map(*chain.from_iterable((F.lit(v), F.lit(i + 1)) for i, v in enumerate(values)))
    return F.coalesce(F.try_element_at(mapping, F.col(col)), F.lit(UNKNOWN_INDEX))


def encode_features(df: DataFrame, vocabularies: Mapping[str, list]) -> DataFrame:
    """Replace categorical values by their int32 vocabulary index and cast continuous columns to float32 (null -> 0).

    The raw Store number is kept as StoreId; the lookup is a literal map (a hash lookup inside the JVM).
    """
    df = df.withColumn(STORE_ID_COL, F.col("Store").cast("int"))
    return df.select(
        *[c for c in df.columns if c not in FEATURE_COLS],
        *[_index_of(col, vocabularies[col]).cast("int").alias(col) for col in CATEGORICAL_COLS],
        *[F.coalesce(F.col(col).cast("float"), F.lit(0.0).cast("float")).alias(col) for col in CONTINUOUS_COLS])


def log_label(df: DataFrame) -> DataFrame:
    """Sales -> log(Sales) as float32 (rows with Sales > 0 only)."""
    return df.withColumn(LABEL_COL, F.log(F.col(LABEL_COL)).cast("float"))


def encoded_split(classified: DataFrame, name: str, vocabularies: Mapping[str, list]) -> DataFrame:
    """The rows of one split (train, validation or test) as the model reads them, SPLIT_COLUMNS only."""
    rows = encode_features(classified.filter(F.col(split.OUTCOME) == name), vocabularies)
    if name != TEST_DIR:
        rows = log_label(rows)
    return rows.select(*SPLIT_COLUMNS[name])


def feature_spec(vocabularies: Mapping[str, list]) -> dict:
    sizes = vocab_sizes(vocabularies)
    return {"categorical": [{"name": col, "vocab_size": sizes[col]} for col in CATEGORICAL_COLS],
            "continuous": list(CONTINUOUS_COLS), "label": LABEL_COL, "label_transform": "log",
            "unknown_index": UNKNOWN_INDEX, "feature_order": list(FEATURE_COLS)}
