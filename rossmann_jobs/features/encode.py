"""Vocabularies and the model encoding: categorical -> int32 index (0 = unknown), continuous -> float32, log label."""
from __future__ import annotations

from datetime import date, timedelta
from itertools import chain
from typing import Any, Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from rossmann_jobs.features import split
from rossmann_jobs.features.spec import (
    CATEGORICAL_COLS,
    CONTINUOUS_COLS,
    FEATURE_COLS,
    LABEL_COL,
    ORIGIN_COLS,
    STORE_ID_COL,
    UNKNOWN_INDEX,
)
from rossmann_jobs.output_layout import TEST_DIR, TRAIN_DIR, VALIDATION_DIR

# Ordered columns whose values after the train split's last one take that one's index. A value no train row holds
# would have an embedding row that training never moves (random). Every forecast made from mid November crosses into
# a year with no train row, as do the validation window and the horizon from 1 January until the train split reaches
# the new year (RECENT holds the last 48 days out): the new year is read as the last trained one, the level the origin
# features carry (docs/decisions.md, "a year later than the train split's last"). Likely too ISO week 53 (late
# December, in one year of five or six: 2015, 2020, 2026), which a history of two or three years seldom holds: it is
# read as week 52.
AS_LAST_TRAINED_COLS = ("Year", "Week")
LAST_ISO_WEEK, LONG_YEAR_WEEK = 52, 53
MAP_LOOKUP_MAX = 64         # other vocabularies up to this size are encoded with a literal map, larger ones with a join
ARRAY_LOOKUP_MAX_SPAN = 1 << 16   # integer vocabularies spanning up to this many values are an array lookup
SPLIT_COLUMNS = {
    TRAIN_DIR: [STORE_ID_COL, "Date", *FEATURE_COLS, LABEL_COL],
    VALIDATION_DIR: [STORE_ID_COL, "Date", *FEATURE_COLS, LABEL_COL],
    TEST_DIR: ["Id", STORE_ID_COL, "Date", "Open", *FEATURE_COLS],
}


def sorted_vocabularies(value_sets: Mapping[str, list]) -> dict[str, list]:
    """Sorted known values per column; value i (0-based) gets index i + 1, index 0 is unknown/missing."""
    return {col: sorted(value_sets[col]) for col in CATEGORICAL_COLS}


def has_iso_week_53(year: int) -> bool:
    """Whether ISO year `year` has 53 weeks (28 December always lies in the year's last week)."""
    return date(year, 12, 28).isocalendar().week == LONG_YEAR_WEEK


def last_trained_values(first_date: date, last_train_date: date) -> dict[str, int]:
    """Per AS_LAST_TRAINED_COLS column, the latest value a train row dated first_date .. last_train_date can hold:
    last_train_date's year; ISO week 53 if one of such a week's days lies in that range, else 52. From the dates
    alone, as the train split holds the days of its range that stores trade."""
    long_weeks = [date.fromisocalendar(year, LONG_YEAR_WEEK, 1)
                  for year in range(first_date.year - 1, last_train_date.year + 1) if has_iso_week_53(year)]
    trained_53 = any(monday <= last_train_date and monday + timedelta(days=6) >= first_date for monday in long_weeks)
    return {"Year": last_train_date.year, "Week": LONG_YEAR_WEEK if trained_53 else LAST_ISO_WEEK}


def trained_vocabularies(vocabularies: Mapping[str, list], first_date: date | None,
                         last_train_date: date) -> tuple[dict[str, list], dict[str, list]]:
    """(the vocabularies without the AS_LAST_TRAINED_COLS values later than any train row dated first_date (the
    first train.csv row <= D; None: last_train_date) .. last_train_date holds (last_trained_values); those later
    values per column, which encode_features gives the last trained value's index)."""
    last = last_trained_values(first_date or last_train_date, last_train_date)
    later = {col: [value for value in vocabularies[col] if value > last[col]] for col in AS_LAST_TRAINED_COLS}
    return ({col: [value for value in values if value not in later.get(col, ())]
             for col, values in vocabularies.items()}, later)


def vocab_sizes(vocabularies: Mapping[str, list]) -> dict[str, int]:
    return {col: len(values) + 1 for col, values in vocabularies.items()}


def _value_indices(values: list[Any], later: list[Any]) -> list[tuple[Any, int]]:
    """(value, index) of a vocabulary: i + 1 for values[i], the last one's index for a value in later."""
    return [(value, i + 1) for i, value in enumerate(values)] + [(value, len(values)) for value in later]


def _index_of(col: str, values: list[Any], later: list[Any]):
    """The index of col's value in values (i + 1), the last one's for a value in later, else unknown."""
    if not values:
        return F.lit(UNKNOWN_INDEX)
    indices = _value_indices(values, later)
    if not later and _array_lookup(values) and values == list(range(values[0], values[-1] + 1)):
        # Every integer from the first to the last (days, months, the near-event days): the index is an offset,
        # less generated code than an array in the split writes' fused stage, near HotSpot's size limit.
        index = F.when(F.col(col).between(values[0], values[-1]),
                       (F.col(col) - F.lit(values[0] - 1)).cast("int"))
    elif _array_lookup(values + later):
        # Position value - low in one literal array: constant time, where a map lookup scans the map's keys. The
        # later values only lengthen the array: the split writes' fused code is near HotSpot's size limit
        # (tests/jobs/test_prepare_job.py).
        low, high = values[0], max(values + later)
        table = [UNKNOWN_INDEX] * (high - low + 1)
        for value, index in indices:
            table[value - low] = index
        position = (F.col(col) - F.lit(low) + F.lit(1)).cast("int")
        index = F.when(F.col(col).between(low, high), F.element_at(_int_array(table), position))
    else:
        mapping = F.create_map(*chain.from_iterable((F.lit(v), F.lit(i)) for v, i in indices))
        index = F.try_element_at(mapping, F.col(col))
    return F.coalesce(index, F.lit(UNKNOWN_INDEX))


def _int_array(values: list[int]) -> Column:
    """A literal int array, built by one SQL call: array(*map(F.lit, values)) costs a py4j round trip per value
    (over a second of driver time per run for the Store vocabulary and the year ranges)."""
    return F.expr(f"array({', '.join(str(int(value)) for value in values)})")


def _array_lookup(values: list[Any]) -> bool:
    """Sorted integer values (not booleans) spanning a range small enough for a lookup array."""
    return (all(isinstance(v, int) and not isinstance(v, bool) for v in values)
            and values[-1] - values[0] < ARRAY_LOOKUP_MAX_SPAN)


def _vocabulary_table(spark, col: str, values: list[Any], later: list[Any], value_type: T.DataType) -> DataFrame:
    schema = T.StructType([T.StructField(f"_value_{col}", value_type), T.StructField(f"_index_{col}", T.IntegerType())])
    return spark.createDataFrame(_value_indices(values, later), schema)


def encode_features(df: DataFrame, vocabularies: Mapping[str, list],
                    later_values: Mapping[str, list] | None = None) -> DataFrame:
    """Replace categorical values by their int32 vocabulary index and cast continuous columns to float32 (null -> 0).
    later_values: per column, values encoded as the vocabulary's last (trained_vocabularies).

    The raw Store number is kept as StoreId. Integer vocabularies (Store, dates, counts) are literal arrays
    indexed by value; other small ones are literal maps; Spark scans a map's keys, so larger ones are looked up
    with a broadcast join instead.
    """
    df = df.withColumn(STORE_ID_COL, F.col("Store").cast("int"))
    joined = [col for col in CATEGORICAL_COLS
              if len(vocabularies[col]) > MAP_LOOKUP_MAX and not _array_lookup(vocabularies[col])]
    later = {col: list((later_values or {}).get(col, [])) for col in CATEGORICAL_COLS}
    for col in joined:
        table = _vocabulary_table(df.sparkSession, col, vocabularies[col], later[col], df.schema[col].dataType)
        df = df.join(F.broadcast(table), F.col(col) == F.col(f"_value_{col}"), "left")
    index = {col: F.coalesce(F.col(f"_index_{col}"), F.lit(UNKNOWN_INDEX)) if col in joined
             else _index_of(col, vocabularies[col], later[col]) for col in CATEGORICAL_COLS}
    helpers = {f"_value_{col}" for col in joined} | {f"_index_{col}" for col in joined}
    return df.select(
        *[c for c in df.columns if c not in FEATURE_COLS and c not in helpers],
        *[index[col].cast("int").alias(col) for col in CATEGORICAL_COLS],
        *[_continuous(col).alias(col) for col in CONTINUOUS_COLS])


# Continuous columns that are never null on a written row, so the split writes only cast them (no coalesce): the
# origin features (float32 from features/recent_level.py: every written row finds its store's levels) and the
# After day counts (every written row is one the counts were computed over: features/event_days.py). The
# split-write stages sit near HotSpot's JIT size limit (tests/jobs/test_prepare_job.py).
NEVER_NULL_WHEN_WRITTEN = [*ORIGIN_COLS, *(f"After{event}" for event in ("Promo", "StateHoliday", "SchoolHoliday"))]


def _continuous(col: str) -> Column:
    """A continuous column as the model reads it: float32, null -> 0.0 (the cast costs no code on the origin
    features, already float32: the optimizer drops it)."""
    as_float = F.col(col).cast("float")
    return as_float if col in NEVER_NULL_WHEN_WRITTEN else F.coalesce(as_float, F.lit(0.0).cast("float"))


def encoded_split(encoded: DataFrame, name: str) -> DataFrame:
    """The rows of one split (train, validation or test) of encoded rows as the model reads them: SPLIT_COLUMNS,
    with the label log(Sales) as float32 on train and validation."""
    rows = encoded.filter(F.col(split.OUTCOME) == name)
    if name != TEST_DIR:
        rows = rows.withColumn(LABEL_COL, F.log(F.col(LABEL_COL)).cast("float"))
    return rows.select(*SPLIT_COLUMNS[name])


def feature_spec(vocabularies: Mapping[str, list]) -> dict:
    sizes = vocab_sizes(vocabularies)
    return {"categorical": [{"name": col, "vocab_size": sizes[col]} for col in CATEGORICAL_COLS],
            "continuous": list(CONTINUOUS_COLS), "label": LABEL_COL, "label_transform": "log",
            "unknown_index": UNKNOWN_INDEX, "feature_order": list(FEATURE_COLS)}
