"""The predict job's inputs read and checked: the prepared splits, the raw test.csv's Ids, the baseline's history."""
from __future__ import annotations

import logging
from datetime import date, timedelta

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rossmann_jobs import storage
from rossmann_jobs.features.raw_schemas import TEST as RAW_TEST
from rossmann_jobs.features.recent_level import LEAD_COL
from rossmann_jobs.features.spec import CATEGORICAL_COLS, FEATURE_COLS, LABEL_COL
from rossmann_jobs.features.validate import RawInputError, read_text_csv
from rossmann_jobs.forecast import quantiles
from rossmann_jobs.forecast.baseline import BASELINE_COL, baseline_forecast
from rossmann_jobs.forecast.metrics import FORECAST_COL
from rossmann_jobs.forecast.open_flag import (
    CLOSED,
    INVALID,
    OPEN,
    OPEN_BLANK,
    OPEN_STATUS_COL,
    is_forecast,
    with_open_status,
)
from rossmann_jobs.forecast.prediction_frames import SPLIT_COL, TEST, VALIDATION
from rossmann_jobs.forecast.prepared_checks import (
    DATE_TYPES,
    FLOAT_TYPES,
    INTEGER_TYPES,
    ForecastInputError,
    check_columns,
    check_values,
    example_rows,
    feature_types,
    vocab_sizes,
)
from rossmann_jobs.forecast.submission import (
    check_accounting,
    check_forecast_values,
    check_raw_test_ids,
    check_submission_ids,
    check_unique_test_ids,
)
from rossmann_jobs.forecast.vocabulary import mappings_to_model, remap_indices, unknown_counts
from rossmann_jobs.output_layout import REJECTED_DIR, TEST_DIR, TRAIN_DIR, VALIDATION_DIR
from rossmann_jobs.spark_session import read_parquet

log = logging.getLogger("rossmann.predict")

CANONICAL_KEY_TYPES = {"Id": "int", "StoreId": "int", "Open": "int", "Date": "date", LABEL_COL: "float"}
# What the baseline is fitted on (features.spec encodes DayOfWeek and Promo as indices, StoreId raw).
HISTORY_TYPES = {"StoreId": INTEGER_TYPES, "Date": DATE_TYPES, "DayOfWeek": INTEGER_TYPES, "Promo": INTEGER_TYPES,
                 LABEL_COL: FLOAT_TYPES}


def check_feature_inputs(metadata: dict, metadata_uri: str) -> tuple[dict[str, int], date]:
    """(vocabulary sizes, as-of date) of the prepared features, as the forecast reads them."""
    sizes = vocab_sizes(metadata, metadata_uri)
    try:
        as_of = date.fromisoformat(metadata["as_of"])
    except (KeyError, TypeError, ValueError) as error:
        raise ForecastInputError(f"{metadata_uri}: 'as_of' must be a YYYY-MM-DD date ({error!r}); the baseline is "
                                 "fitted on the rows up to it") from None
    return sizes, as_of


def validation_window_start(metadata: dict, metadata_uri: str) -> date:
    """The validation window's first day, as prepare recorded it."""
    try:
        return date.fromisoformat(metadata["validation_window"]["start"])
    except (KeyError, TypeError, ValueError) as error:
        raise ForecastInputError(f"{metadata_uri}: 'validation_window.start' must be a YYYY-MM-DD date ({error!r}); "
                                 "the naive fallback is fitted on the rows before it to forecast the window") from None


def check_model_inputs(artifact: dict, artifact_uri: str, metadata: dict, metadata_uri: str
                       ) -> tuple[dict[str, int], date, dict]:
    """(vocabulary sizes, as-of date, re-indexing to the model's vocabularies) of the features for the model; both
    documents must name every categorical column's vocabulary."""
    for uri, document in ((artifact_uri, artifact), (metadata_uri, metadata)):
        missing = sorted(set(CATEGORICAL_COLS) - set(document.get("vocabularies") or {}))
        if missing:
            raise ForecastInputError(f"{uri}: 'vocabularies' (column -> known values in index order) lacks {missing};"
                                     " needed to check that the model and the features encode values alike")
    sizes, as_of = check_feature_inputs(metadata, metadata_uri)
    mappings = mappings_to_model(metadata["vocabularies"], artifact["vocabularies"])
    if mappings:
        log.warning("features and model vocabularies differ; re-indexing %s (values unknown to the model: %s)",
                    sorted(mappings), unknown_counts(mappings))
    return sizes, as_of, mappings


def read_split(spark: SparkSession, uri: str, keys: dict[str, tuple[type, ...]], non_null_keys: list[str],
               sizes: dict[str, int]) -> tuple[DataFrame, int]:
    """A prepared split with its keys in canonical types, checked against the spec; and its row count."""
    df = read_parquet(spark, uri)
    check_columns(df, uri, {**keys, **feature_types()})
    for column in keys:
        df = df.withColumn(column, F.col(column).cast(CANONICAL_KEY_TYPES[column]))
    return df, check_values(df, uri, sizes, non_null_keys + FEATURE_COLS)


def read_raw_test_ids(spark: SparkSession, raw_uri: str) -> tuple[pd.DataFrame, str]:
    """(RawId text + Id int, missing where it is not one, of every data row of the drop's test.csv, its URI); read
    with the explicit raw schema, collected: one row per horizon day and store."""
    uri = storage.join(raw_uri, RAW_TEST.name)
    if not storage.exists(uri):
        raise ForecastInputError(f"{uri}: missing; --raw must be the drop the features were prepared from.")
    # Read as prepare reads it (columns by header name, text): the Ids prepare saw, BOM or not.
    try:
        rows = read_text_csv(spark, uri, RAW_TEST)
    except RawInputError as error:
        raise ForecastInputError(f"{uri}: {error}") from None
    return rows.select(F.col("Id").alias("RawId"), F.expr("try_cast(trim(Id) AS INT)").alias("Id")).toPandas(), uri


def read_history(spark: SparkSession, features_attempt: str) -> DataFrame:
    """The prepared train + validation rows (every row dated <= as-of) with the columns the baseline is fitted on."""
    parts = []
    for name in (TRAIN_DIR, VALIDATION_DIR):
        uri = storage.join(features_attempt, name)
        df = read_parquet(spark, uri)
        check_columns(df, uri, HISTORY_TYPES)
        parts.append(df.select(F.col("StoreId").cast("int"), F.col("Date").cast("date"),
                               F.col("DayOfWeek").cast("int"), F.col("Promo").cast("int"),
                               F.col(LABEL_COL).cast("float")))
    return parts[0].unionByName(parts[1])


def read_trend_history(spark: SparkSession, features_attempt: str) -> DataFrame:
    """State, Date and the trend columns of the prepared train + validation rows (every row dated <= as-of)."""
    columns = ["State", "Date", *quantiles.TREND_COLS]
    parts = [read_parquet(spark, storage.join(features_attempt, name)).select(*columns)
             for name in (TRAIN_DIR, VALIDATION_DIR)]
    return parts[0].unionByName(parts[1])


def read_inputs(spark: SparkSession, features_attempt: str, sizes: dict[str, int], mappings: dict, as_of: date,
                raw_ids: pd.DataFrame, raw_test_uri: str, levels: tuple[float, ...] = quantiles.QUANTILE_LEVELS,
                validation_start: date | None = None
                ) -> tuple[DataFrame, DataFrame, DataFrame, dict[str, int]]:
    """(test with OpenStatus, the baseline and its quantiles at levels, validation, validation with the trend its
    origin knew, row counts), all re-indexed to the model's vocabularies; the test split must hold every Id of the
    raw test.csv. With validation_start (the naive fallback, which forecasts the validation window as it forecasts
    the horizon), the validation rows carry the baseline too, fitted on the rows dated before that day."""
    test_uri = storage.join(features_attempt, TEST_DIR)
    test_keys = {"Id": INTEGER_TYPES, "StoreId": INTEGER_TYPES, "Date": DATE_TYPES, "Open": INTEGER_TYPES}
    test, _ = read_split(spark, test_uri, test_keys, ["Id", "StoreId", "Date"], sizes)
    test_ids = test.select("Id").toPandas()["Id"]
    check_unique_test_ids(test_ids, test_uri)
    check_raw_test_ids(raw_ids, test_ids, raw_test_uri, test_uri, storage.join(features_attempt, REJECTED_DIR))
    validation, validation_rows = read_split(
        spark, storage.join(features_attempt, VALIDATION_DIR),
        {"StoreId": INTEGER_TYPES, "Date": DATE_TYPES, LABEL_COL: FLOAT_TYPES}, ["StoreId", "Date", LABEL_COL], sizes)
    # Fitted before the re-indexing: history and test rows share the prepare output's DayOfWeek/Promo indices.
    # Materialized once (small: one row per test Id), since the test frame is queried several times below.
    history = read_history(spark, features_attempt)
    baseline_columns = quantiles.quantile_columns(levels, quantiles.BASELINE_PREFIX)
    baseline = (baseline_forecast(test.select("Id", "StoreId", "DayOfWeek", "Promo"), history, as_of,
                                  levels=levels, columns=baseline_columns)
                .select("Id", BASELINE_COL, *baseline_columns).localCheckpoint())
    test = with_open_status(remap_indices(test, mappings)).join(F.broadcast(baseline), "Id", "left")
    if validation_start is not None:
        validation = baseline_forecast(validation, history, validation_start - timedelta(days=1))
    status = {row[OPEN_STATUS_COL]: row["count"] for row in test.groupBy(OPEN_STATUS_COL).count().collect()}
    if status.get(INVALID):
        invalid = test.filter(F.col(OPEN_STATUS_COL) == INVALID)
        raise ForecastInputError(f"{test_uri}: column Open must be 0, 1 or blank; {status[INVALID]} row(s) differ, "
                                 f"e.g. {example_rows(invalid, ['Id', 'StoreId', 'Date', 'Open'])}")
    if status.get(OPEN_BLANK):
        log.warning("%d test row(s) have a blank Open: treated as open and forecast", status[OPEN_BLANK])
    counts = {"test": sum(status.values()), "forecast": status.get(OPEN, 0) + status.get(OPEN_BLANK, 0),
              "closed": status.get(CLOSED, 0), "blank_open": status.get(OPEN_BLANK, 0),
              "validation": validation_rows}
    # Before the re-indexing: the trend history's State indices are the prepare output's, as the validation rows'.
    from_origin = quantiles.trend_at_origin(validation, read_trend_history(spark, features_attempt), LEAD_COL)
    return test, remap_indices(validation, mappings), remap_indices(from_origin, mappings), counts


def check_predictions(predictions: DataFrame, raw_ids: pd.DataFrame, submission: pd.DataFrame,
                      counts: dict[str, int]) -> None:
    """Every test row forecast or closed exactly once, Ids as in the raw test.csv, forecasts finite and positive."""
    written = {(row[SPLIT_COL], row[OPEN_STATUS_COL]): row["count"]
               for row in predictions.groupBy(SPLIT_COL, OPEN_STATUS_COL).count().collect()}
    forecast = sum(n for (split, status), n in written.items() if split == TEST and status != CLOSED)
    check_accounting(counts["test"], forecast, written.get((TEST, CLOSED), 0))
    check_accounting(counts["validation"], written.get((VALIDATION, None), 0), 0)
    check_submission_ids(raw_ids["Id"], submission["Id"])
    check_forecast_values(predictions.filter((F.col(SPLIT_COL) == VALIDATION) | is_forecast()), FORECAST_COL)
