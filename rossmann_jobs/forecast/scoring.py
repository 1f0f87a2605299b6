"""Score past forecasts on the actual sales of a later drop: exp-RMSPE and median forecast/actual ratio (Spark).

A forecast made as of D0 is scored with drop D (D0 < D) on every store and day it covers that has an actual:
rows of the drop's train.csv that prepare would accept (features/validate.py), dated in (D0, D] and inside the
forecast's horizon, with Sales > 0 (the Kaggle convention: a day without sales says nothing about a percentage
error), for the stores the forecast holds. An actual the forecast has no row for counts with forecast 0 (model and
baseline): the forecast said nothing would be sold, so it is a 100 % miss, not a row to leave out. A forecast row
without an actual (a closed day, a day not yet known) is not scored. The median of forecast / actual over the same
rows shows a bias exp-RMSPE hides (a forecast 8 % high on every day has ratio 1.08); a row without a forecast row
has ratio 0, as it is a 100 % miss in exp-RMSPE.
"""
from __future__ import annotations

from datetime import date, timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from rossmann_jobs.features.validate import acceptable
from rossmann_jobs.forecast.baseline import BASELINE_COL
from rossmann_jobs.forecast.metrics import ACTUAL_COL, FORECAST_COL, rmspe
from rossmann_jobs.forecast.score_records import (
    BASELINE_MEDIAN_RATIO,
    BASELINE_RMSPE,
    MODEL_MEDIAN_RATIO,
    MODEL_RMSPE,
)

KEY_COL, AS_OF_COL = "ForecastKey", "ForecastAsOf"   # "<as_of>/<run key>" and its as-of date D0
LEAD_COL, LEAD_WEEK_COL, HAS_FORECAST_COL = "LeadDay", "LeadWeek", "HasForecast"
HORIZON_START_COL, HORIZON_END_COL = "HorizonStart", "HorizonEnd"
FORECAST_COLUMNS = [KEY_COL, AS_OF_COL, "StoreId", "Date", FORECAST_COL, BASELINE_COL]


def actual_sales(train: DataFrame, after: date, through: date) -> DataFrame:
    """StoreId, Date, SalesActual > 0 of the acceptable rows of parsed train.csv (validate.parse_columns) dated in
    (after, through]; a store and day given more than once counts for none, as prepare quarantines every copy."""
    rows = train.filter(acceptable() & (F.col("Date") > F.lit(after)) & (F.col("Date") <= F.lit(through)))
    copies = F.count(F.lit(1)).over(Window.partitionBy("Store", "Date"))
    return (rows.withColumn("_copies", copies).filter((F.col("_copies") == 1) & (F.col("Sales") > 0))
            .select(F.col("Store").cast("int").alias("StoreId"), "Date",
                    F.col("Sales").cast("double").alias(ACTUAL_COL)))


def horizons(forecasts: DataFrame) -> DataFrame:
    """KEY_COL, AS_OF_COL and the first and last day each forecast covers."""
    return forecasts.groupBy(KEY_COL, AS_OF_COL).agg(F.min("Date").alias(HORIZON_START_COL),
                                                     F.max("Date").alias(HORIZON_END_COL))


def scored_rows(forecasts: DataFrame, actuals: DataFrame, scoring_date: date) -> DataFrame:
    """One row per (forecast, store, day) to score: KEY_COL, AS_OF_COL, StoreId, Date, LEAD_COL (days after the
    as-of date), LEAD_WEEK_COL (ceil(lead day / 7): 1 for lead days 1-7 ... 7 for 43-48), SalesActual, the model's
    and the baseline's forecast (0 where the forecast has no row) and HAS_FORECAST_COL. forecasts:
    FORECAST_COLUMNS of the forecasts' test-split predictions."""
    stores = forecasts.select(KEY_COL, "StoreId").distinct()
    window = horizons(forecasts)
    in_window = ((F.col("Date") > F.col(AS_OF_COL)) & (F.col("Date") <= F.lit(scoring_date))
                 & F.col("Date").between(F.col(HORIZON_START_COL), F.col(HORIZON_END_COL)))
    candidates = actuals.join(stores, "StoreId").join(window, KEY_COL).filter(in_window)
    held = forecasts.select(KEY_COL, "StoreId", "Date", FORECAST_COL, BASELINE_COL,
                            F.lit(True).alias(HAS_FORECAST_COL))
    joined = candidates.join(held, [KEY_COL, "StoreId", "Date"], "left")
    has_forecast = F.coalesce(F.col(HAS_FORECAST_COL), F.lit(False))
    # A null baseline on a held row (a forecast made before predict wrote one) stays null: not scored as 0.
    lead_day = F.datediff("Date", AS_OF_COL)
    return joined.select(
        KEY_COL, AS_OF_COL, "StoreId", "Date", lead_day.alias(LEAD_COL),
        F.ceil(lead_day / 7).cast("int").alias(LEAD_WEEK_COL), ACTUAL_COL,
        F.when(has_forecast, F.col(FORECAST_COL)).otherwise(F.lit(0.0)).alias(FORECAST_COL),
        F.when(has_forecast, F.col(BASELINE_COL)).otherwise(F.lit(0.0)).alias(BASELINE_COL),
        has_forecast.alias(HAS_FORECAST_COL))


def median_ratio(actual: str, forecast: str) -> Column:
    """The exact median of forecast / actual (scored rows have actual > 0): exact, so re-runs agree to the bit."""
    return F.median(F.col(forecast) / F.col(actual))


def scores() -> list[Column]:
    """The aggregates of a group of scored rows: rows, days, rows without a forecast row, exp-RMSPE and median
    forecast/actual ratio of the model and the baseline."""
    # A baseline scored on only some of the rows would not compare with the model: none then.
    full_baseline = F.sum(F.col(BASELINE_COL).isNull().cast("long")) == 0
    return [F.count(F.lit(1)).alias("rows"), F.countDistinct("Date").alias("days"),
            F.sum((~F.col(HAS_FORECAST_COL)).cast("long")).alias("rows_without_forecast"),
            rmspe(ACTUAL_COL, FORECAST_COL).alias(MODEL_RMSPE),
            F.when(full_baseline, rmspe(ACTUAL_COL, BASELINE_COL)).alias(BASELINE_RMSPE),
            median_ratio(ACTUAL_COL, FORECAST_COL).alias(MODEL_MEDIAN_RATIO),
            F.when(full_baseline, median_ratio(ACTUAL_COL, BASELINE_COL)).alias(BASELINE_MEDIAN_RATIO)]


def score_table(scored: DataFrame, by: list[str]) -> DataFrame:
    """Per KEY_COL and `by`: scores() of the scored rows."""
    return scored.groupBy(KEY_COL, *by).agg(*scores()).orderBy(KEY_COL, *by)


def recent_scores(scored: DataFrame, scoring_date: date, window_days: int) -> DataFrame:
    """One row: scores() and the number of forecasts over the scored rows (of every forecast) dated in the last
    window_days days up to scoring_date, whatever their lead day; rows 0 and null scores when there is none."""
    recent = scored.filter(F.col("Date") > F.lit(scoring_date - timedelta(days=window_days)))
    return recent.agg(F.countDistinct(KEY_COL).alias("forecasts"), *scores())
