"""Forecast frames for the test horizon and the validation window, in the one predictions Parquet schema.

Test rows carry the naive seasonal baseline (forecast/baseline.py) and its quantiles beside the model's forecast and
quantile forecasts (forecast/quantiles.py), so every forecast can later be scored against the baseline on the same
rows; closed days are 0 in all of them. Validation rows have no baseline and no quantiles: their residuals calibrate
the test rows' quantiles. Both carry their lead week (test: days after the as-of date; validation: the LeadDays
feature, the row's distance from its origin).
"""
from __future__ import annotations

from datetime import date
from typing import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.features.recent_level import LEAD_COL
from rossmann_jobs.features.spec import LABEL_COL
from rossmann_jobs.forecast.baseline import BASELINE_COL
from rossmann_jobs.forecast.inference import with_log_forecast
from rossmann_jobs.forecast.metrics import ACTUAL_COL, FORECAST_COL
from rossmann_jobs.forecast.open_flag import CLOSED, OPEN_STATUS_COL, is_forecast
from rossmann_jobs.forecast.quantiles import (
    BASELINE_PREFIX,
    LEAD_WEEK_COL,
    ORIGIN_FORECAST_COL,
    QUANTILE_LEVELS,
    lead_week,
    quantile_columns,
    with_quantiles,
)
from rossmann_jobs.model.broadcast import LOG_FORECAST_COL, BroadcastModel

SPLIT_COL = "split"
TEST, VALIDATION = "test", "validation"


def prediction_columns(levels: Sequence[float] = QUANTILE_LEVELS) -> list[str]:
    """The predictions Parquet's columns for the given quantile levels."""
    return [SPLIT_COL, "Id", "StoreId", "Date", "Open", OPEN_STATUS_COL, LEAD_WEEK_COL, LOG_FORECAST_COL,
            FORECAST_COL, *quantile_columns(levels), BASELINE_COL, *quantile_columns(levels, BASELINE_PREFIX),
            ACTUAL_COL]


def with_min_partitions(df: DataFrame, partitions: int) -> DataFrame:
    """Few input files must not leave executor cores idle during inference."""
    return df if df.rdd.getNumPartitions() >= partitions else df.repartition(partitions)


def test_predictions(test: DataFrame, model: BroadcastModel, partitions: int, as_of: date,
                     residual_table: dict[int, list[float]], levels: Sequence[float] = QUANTILE_LEVELS) -> DataFrame:
    """Test rows with OpenStatus, BASELINE_COL and its quantiles: open ones get the model's forecast and its
    quantiles (forecast x exp(residual quantile of the lead week)), closed ones Sales 0 in every column (model and
    baseline) without inference."""
    baseline_quantiles = quantile_columns(levels, BASELINE_PREFIX)
    keep = ["Id", "StoreId", "Date", "Open", OPEN_STATUS_COL, BASELINE_COL, *baseline_quantiles]
    forecast = with_log_forecast(with_min_partitions(test.filter(is_forecast()), partitions), model, keep)
    forecast = forecast.withColumn(FORECAST_COL, F.exp(F.col(LOG_FORECAST_COL)).cast("double"))
    closed = (test.filter(F.col(OPEN_STATUS_COL) == CLOSED).select(*keep)
              .withColumn(LOG_FORECAST_COL, F.lit(None).cast("float"))
              .withColumns({name: F.lit(0.0).cast("double")
                            for name in (FORECAST_COL, BASELINE_COL, *baseline_quantiles)}))
    rows = (forecast.unionByName(closed)
            .withColumn(LEAD_WEEK_COL, lead_week(F.datediff(F.col("Date"), F.lit(as_of)))))
    return (with_quantiles(rows, residual_table, levels, FORECAST_COL)
            .withColumn(ACTUAL_COL, F.lit(None).cast("double"))
            .withColumn(SPLIT_COL, F.lit(TEST))
            .select(*prediction_columns(levels)))


def validation_predictions(validation: DataFrame, model: BroadcastModel, partitions: int,
                           levels: Sequence[float] = QUANTILE_LEVELS) -> DataFrame:
    """Validation rows with the forecast, the actual Sales (exp of the log label) and the lead week."""
    forecast = with_log_forecast(with_min_partitions(validation, partitions), model,
                                 ["StoreId", "Date", LABEL_COL, LEAD_COL])
    nulls = {"Id": "int", "Open": "int", OPEN_STATUS_COL: "string", BASELINE_COL: "double",
             **{name: "double" for name in (*quantile_columns(levels), *quantile_columns(levels, BASELINE_PREFIX))}}
    return (forecast
            .withColumn(FORECAST_COL, F.exp(F.col(LOG_FORECAST_COL)).cast("double"))
            .withColumn(ACTUAL_COL, F.exp(F.col(LABEL_COL)).cast("double"))
            .withColumn(LEAD_WEEK_COL, lead_week(F.col(LEAD_COL)))
            .withColumns({name: F.lit(None).cast(kind) for name, kind in nulls.items()})
            .withColumn(SPLIT_COL, F.lit(VALIDATION))
            .select(*prediction_columns(levels)))


def origin_forecasts(validation_from_origin: DataFrame, model: BroadcastModel, partitions: int
                     ) -> DataFrame:
    """StoreId, Date and ORIGIN_FORECAST_COL: the log forecast of each validation row with the trend its origin
    knew (quantiles.trend_at_origin), which calibrates the quantiles' allowance for the trend's drift."""
    return (with_log_forecast(with_min_partitions(validation_from_origin, partitions), model, ["StoreId", "Date"])
            .withColumnRenamed(LOG_FORECAST_COL, ORIGIN_FORECAST_COL))
