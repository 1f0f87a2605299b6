"""Forecast frames for the test horizon and the validation window, in the one predictions Parquet schema.

Test rows carry the naive seasonal baseline (forecast/baseline.py) beside the model's forecast, so every forecast
can later be scored against it on the same rows; closed days are 0 in both. Validation rows have no baseline.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.features.spec import LABEL_COL
from rossmann_jobs.forecast.baseline import BASELINE_COL
from rossmann_jobs.forecast.inference import LOG_FORECAST_COL, BroadcastModel, with_log_forecast
from rossmann_jobs.forecast.metrics import ACTUAL_COL, FORECAST_COL
from rossmann_jobs.forecast.open_rule import CLOSED, OPEN_STATUS_COL, is_forecast

SPLIT_COL = "split"
TEST, VALIDATION = "test", "validation"
PREDICTION_COLUMNS = [SPLIT_COL, "Id", "StoreId", "Date", "Open", OPEN_STATUS_COL, LOG_FORECAST_COL,
                      FORECAST_COL, BASELINE_COL, ACTUAL_COL]


def with_min_partitions(df: DataFrame, partitions: int) -> DataFrame:
    """Few input files must not leave executor cores idle during inference."""
    return df if df.rdd.getNumPartitions() >= partitions else df.repartition(partitions)


def test_predictions(test: DataFrame, model: BroadcastModel, threads: int, partitions: int) -> DataFrame:
    """Test rows with OpenStatus and BASELINE_COL: open ones get the model's forecast, closed ones Sales 0 (model and
    baseline) without inference."""
    keep = ["Id", "StoreId", "Date", "Open", OPEN_STATUS_COL, BASELINE_COL]
    forecast = with_log_forecast(with_min_partitions(test.filter(is_forecast()), partitions), model, keep,
                                 threads)
    forecast = forecast.withColumn(FORECAST_COL, F.exp(F.col(LOG_FORECAST_COL)).cast("double"))
    closed = (test.filter(F.col(OPEN_STATUS_COL) == CLOSED).select(*keep)
              .withColumn(LOG_FORECAST_COL, F.lit(None).cast("float"))
              .withColumn(FORECAST_COL, F.lit(0.0).cast("double"))
              .withColumn(BASELINE_COL, F.lit(0.0).cast("double")))
    return (forecast.unionByName(closed)
            .withColumn(ACTUAL_COL, F.lit(None).cast("double"))
            .withColumn(SPLIT_COL, F.lit(TEST))
            .select(*PREDICTION_COLUMNS))


def validation_predictions(validation: DataFrame, model: BroadcastModel, threads: int, partitions: int) -> DataFrame:
    """Validation rows with the forecast and the actual Sales (exp of the log label)."""
    forecast = with_log_forecast(with_min_partitions(validation, partitions), model,
                                 ["StoreId", "Date", LABEL_COL], threads)
    return (forecast
            .withColumn(FORECAST_COL, F.exp(F.col(LOG_FORECAST_COL)).cast("double"))
            .withColumn(ACTUAL_COL, F.exp(F.col(LABEL_COL)).cast("double"))
            .withColumn("Id", F.lit(None).cast("int"))
            .withColumn("Open", F.lit(None).cast("int"))
            .withColumn(OPEN_STATUS_COL, F.lit(None).cast("string"))
            .withColumn(BASELINE_COL, F.lit(None).cast("double"))
            .withColumn(SPLIT_COL, F.lit(VALIDATION))
            .select(*PREDICTION_COLUMNS))
