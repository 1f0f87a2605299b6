"""Checks of the prepared Parquet splits against the feature spec, with actionable errors naming file and column."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from rossmann_jobs.features.spec import CATEGORICAL_COLS, CONTINUOUS_COLS

INTEGER_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
FLOAT_TYPES = (T.FloatType, T.DoubleType)
DATE_TYPES = (T.DateType, T.TimestampType, T.StringType)
EXAMPLE_ROWS = 5


class ForecastInputError(ValueError):
    """The prepared features or the model artifact do not meet the contract; the message says where and how."""


def example_rows(df: DataFrame, columns: list[str]) -> str:
    rows = df.select(*columns).limit(EXAMPLE_ROWS).collect()
    return "; ".join(str(row.asDict()) for row in rows)


def feature_types() -> dict[str, tuple[type, ...]]:
    return {**{c: INTEGER_TYPES for c in CATEGORICAL_COLS}, **{c: FLOAT_TYPES for c in CONTINUOUS_COLS}}


def check_columns(df: DataFrame, source: str, required: dict[str, tuple[type, ...]]) -> None:
    """Raise if a required column is missing or has a type outside the allowed Spark types."""
    fields = {field.name: field.dataType for field in df.schema.fields}
    missing = [name for name in required if name not in fields]
    if missing:
        raise ForecastInputError(f"{source}: missing column(s) {missing}; found {sorted(fields)}. "
                                 "Re-run the prepare job that writes this split.")
    wrong = {name: fields[name].simpleString() for name, types in required.items()
             if not isinstance(fields[name], types)}
    if wrong:
        raise ForecastInputError(f"{source}: column(s) with unexpected types {wrong}; the feature spec wants int "
                                 "categorical indices and float continuous values (rossmann_jobs/features/spec.py).")


def check_values(df: DataFrame, source: str, vocab_sizes: dict[str, int], non_null: list[str]) -> int:
    """One pass: no nulls in `non_null`, every categorical index in [0, vocab_size) (else the embedding fails).

    Returns the row count.
    """
    aggregates = [F.count(F.lit(1)).alias("rows")]
    aggregates += [F.sum(F.col(c).isNull().cast("long")).alias(f"nulls_{c}") for c in non_null]
    aggregates += [F.sum(((F.col(c) < 0) | (F.col(c) >= size)).cast("long")).alias(f"out_{c}")
                   for c, size in vocab_sizes.items()]
    counts = df.agg(*aggregates).first()
    for column in non_null:
        if counts[f"nulls_{column}"]:
            bad = df.filter(F.col(column).isNull())
            raise ForecastInputError(f"{source}: column {column} has {counts[f'nulls_{column}']} null value(s), "
                                     f"e.g. rows {example_rows(bad, ['StoreId', 'Date', column])}.")
    for column, size in vocab_sizes.items():
        if counts[f"out_{column}"]:
            bad = df.filter((F.col(column) < 0) | (F.col(column) >= size))
            raise ForecastInputError(
                f"{source}: column {column} has {counts[f'out_{column}']} index(es) outside 0..{size - 1} (its "
                f"vocab_size in metadata.json is {size}), e.g. rows "
                f"{example_rows(bad, ['StoreId', 'Date', column])}. Re-run the prepare job.")
    return counts["rows"]


def vocab_sizes(metadata: dict, source: str) -> dict[str, int]:
    """Categorical vocab sizes from metadata.json's feature_spec, checked against the spec's column order."""
    try:
        sizes = {entry["name"]: int(entry["vocab_size"]) for entry in metadata["feature_spec"]["categorical"]}
    except (KeyError, TypeError) as error:
        raise ForecastInputError(f"{source}: feature_spec.categorical must list name + vocab_size ({error!r})")
    if list(sizes) != CATEGORICAL_COLS:
        raise ForecastInputError(f"{source}: feature_spec.categorical is {list(sizes)}, expected {CATEGORICAL_COLS}")
    return sizes
