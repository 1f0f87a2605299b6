"""Re-index categorical features from the vocabularies they were prepared with to the ones the model was trained on.

Index i (1..n) means the i-th known value of the vocabulary the features were prepared with; a champion model
trained on an older features run may know a different value list, so its indices would silently point at the
wrong embeddings. Values the model never saw map to 0 (unknown), exactly as prepare encodes unseen values.
"""
from __future__ import annotations

from itertools import chain
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.features.spec import CATEGORICAL_COLS, UNKNOWN_INDEX


def index_mapping(feature_values: list[Any], model_values: list[Any]) -> dict[int, int]:
    """Map each feature index to the model index of the same value (unknown -> 0)."""
    model_index = {value: position + 1 for position, value in enumerate(model_values)}
    mapping = {UNKNOWN_INDEX: UNKNOWN_INDEX}
    for position, value in enumerate(feature_values):
        mapping[position + 1] = model_index.get(value, UNKNOWN_INDEX)
    return mapping


def mappings_to_model(feature_vocabs: dict[str, list[Any]], model_vocabs: dict[str, list[Any]]
                      ) -> dict[str, dict[int, int]]:
    """The index mappings for the categorical columns whose vocabularies differ (empty when all agree)."""
    return {column: index_mapping(feature_vocabs[column], model_vocabs[column])
            for column in CATEGORICAL_COLS if feature_vocabs[column] != model_vocabs[column]}


def remap_indices(df: DataFrame, mappings: dict[str, dict[int, int]]) -> DataFrame:
    """Apply index mappings with literal map lookups (Spark-native, no UDF); out-of-map indices become 0."""
    for column, mapping in mappings.items():
        lookup = F.create_map(*chain.from_iterable((F.lit(k), F.lit(v)) for k, v in sorted(mapping.items())))
        df = df.withColumn(column, F.coalesce(F.try_element_at(lookup, F.col(column)), F.lit(UNKNOWN_INDEX))
                           .cast(df.schema[column].dataType))
    return df


def unknown_counts(mappings: dict[str, dict[int, int]]) -> dict[str, int]:
    """How many known feature values each remapped column loses to 'unknown' (for the log)."""
    return {column: sum(1 for k, v in mapping.items() if k != UNKNOWN_INDEX and v == UNKNOWN_INDEX)
            for column, mapping in mappings.items()}
