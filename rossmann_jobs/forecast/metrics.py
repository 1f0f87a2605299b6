"""Forecast accuracy on the validation window: exp-RMSPE (rossmann_jobs/metrics.py) overall, per store and per day
(Spark aggregates)."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.metrics import rmspe

ACTUAL_COL, FORECAST_COL = "SalesActual", "SalesForecast"


def overall_rmspe(validation: DataFrame) -> float | None:
    return validation.agg(rmspe(ACTUAL_COL, FORECAST_COL).alias("rmspe")).first()["rmspe"]


def per_store(validation: DataFrame) -> DataFrame:
    """StoreId, actual and forecast totals, exp-RMSPE per store."""
    return (validation.groupBy("StoreId")
            .agg(F.sum(ACTUAL_COL).alias(ACTUAL_COL), F.sum(FORECAST_COL).alias(FORECAST_COL),
                 rmspe(ACTUAL_COL, FORECAST_COL).alias("rmspe"), F.count(F.lit(1)).alias("rows")))


def daily_totals(df: DataFrame, columns: list[str], by: list[str] | None = None) -> DataFrame:
    """Sum of the given columns per Date (and per `by` keys), sorted by those keys then Date."""
    keys = [*(by or []), "Date"]
    return df.groupBy(*keys).agg(*[F.sum(c).alias(c) for c in columns]).orderBy(*keys)
