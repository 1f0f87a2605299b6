"""Forecast accuracy on the validation window: exp-RMSPE overall, per store and per day (Spark aggregates)."""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

ACTUAL_COL, FORECAST_COL = "SalesActual", "SalesForecast"


def rmspe(actual: str = ACTUAL_COL, forecast: str = FORECAST_COL) -> Column:
    """sqrt(mean(((y - y_hat) / y)^2)) over rows with y > 0 (rows with y = 0 contribute nothing, as on Kaggle)."""
    squared = F.when(F.col(actual) > 0, F.pow((F.col(actual) - F.col(forecast)) / F.col(actual), 2))
    return F.sqrt(F.avg(squared))


def overall_rmspe(validation: DataFrame) -> float | None:
    return validation.agg(rmspe().alias("rmspe")).first()["rmspe"]


def per_store(validation: DataFrame) -> DataFrame:
    """StoreId, actual and forecast totals, exp-RMSPE per store."""
    return (validation.groupBy("StoreId")
            .agg(F.sum(ACTUAL_COL).alias(ACTUAL_COL), F.sum(FORECAST_COL).alias(FORECAST_COL),
                 rmspe().alias("rmspe"), F.count(F.lit(1)).alias("rows")))


def daily_totals(df: DataFrame, columns: list[str], by: list[str] | None = None) -> DataFrame:
    """Sum of the given columns per Date (and per `by` keys), sorted by those keys then Date."""
    keys = [*(by or []), "Date"]
    return df.groupBy(*keys).agg(*[F.sum(c).alias(c) for c in columns]).orderBy(*keys)
