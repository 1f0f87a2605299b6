"""Score past forecasts on the actual sales of a later drop: exp-RMSPE, median forecast/actual ratio, and the
quantile forecasts' interval coverage and weighted quantile loss (Spark).

A forecast made as of D0 is scored with drop D (D0 < D) on every store and day it covers that has an actual:
rows of the drop's train.csv that prepare would accept (features/validate.py), dated in (D0, D] and inside the
forecast's horizon, with Sales > 0 (the Kaggle convention: a day without sales says nothing about a percentage
error), for the stores the forecast holds. An actual the forecast has no row for counts with forecast 0 (model and
baseline): the forecast said nothing would be sold, so it is a 100 % miss, not a row to leave out. A forecast row
without an actual (a closed day, a day not yet known) is not scored. The median of forecast / actual over the same
rows shows a bias exp-RMSPE hides (a forecast 8 % high on every day has ratio 1.08); a row without a forecast row
has ratio 0, as it is a 100 % miss in exp-RMSPE. The quantile forecasts of the model and of the baseline (the
levels of SCORED_LEVELS: forecast/quantiles.py) are scored on the same rows, 0 where the forecast has no row; a
forecast made before predict wrote quantiles has none scored.
"""
from __future__ import annotations

from datetime import date, timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from rossmann_jobs.features.validate import acceptable
from rossmann_jobs.forecast.baseline import BASELINE_COL
from rossmann_jobs.forecast.metrics import ACTUAL_COL, FORECAST_COL
from rossmann_jobs.forecast.quantiles import (
    BASELINE_PREFIX,
    MODEL_PREFIX,
    QUANTILE_LEVELS,
    lead_week,
    quantile_columns,
)
from rossmann_jobs.metrics import interval_coverage, rmspe, weighted_quantile_loss
from rossmann_jobs.past_forecasts.records import (
    BASELINE_COVERAGE,
    BASELINE_MEDIAN_RATIO,
    BASELINE_QUANTILE_LOSS,
    BASELINE_RMSPE,
    MODEL_COVERAGE,
    MODEL_MEDIAN_RATIO,
    MODEL_QUANTILE_LOSS,
    MODEL_RMSPE,
)

KEY_COL, AS_OF_COL = "ForecastKey", "ForecastAsOf"   # "<as_of>/<run key>" and its as-of date D0
LEAD_COL, LEAD_WEEK_COL, HAS_FORECAST_COL = "LeadDay", "LeadWeek", "HasForecast"
HORIZON_START_COL, HORIZON_END_COL = "HorizonStart", "HorizonEnd"
GROUPING_COL = "ScoreGrouping"   # grouped_scores: which grouping a row of scores belongs to
SCORED_LEVELS = QUANTILE_LEVELS
MODEL_QUANTILES, BASELINE_QUANTILES = (quantile_columns(SCORED_LEVELS, MODEL_PREFIX),
                                       quantile_columns(SCORED_LEVELS, BASELINE_PREFIX))
FORECAST_COLUMNS = [KEY_COL, AS_OF_COL, "StoreId", "Date", FORECAST_COL, BASELINE_COL, *MODEL_QUANTILES,
                    *BASELINE_QUANTILES]


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
    forecast_values = [FORECAST_COL, BASELINE_COL, *MODEL_QUANTILES, *BASELINE_QUANTILES]
    held = forecasts.select(KEY_COL, "StoreId", "Date", *forecast_values, F.lit(True).alias(HAS_FORECAST_COL))
    joined = candidates.join(held, [KEY_COL, "StoreId", "Date"], "left")
    has_forecast = F.coalesce(F.col(HAS_FORECAST_COL), F.lit(False))
    # A null baseline on a held row (a forecast made before predict wrote one) stays null: not scored as 0.
    lead_day = F.datediff("Date", AS_OF_COL)
    return joined.select(
        KEY_COL, AS_OF_COL, "StoreId", "Date", lead_day.alias(LEAD_COL),
        lead_week(lead_day).alias(LEAD_WEEK_COL), ACTUAL_COL,
        *[F.when(has_forecast, F.col(name)).otherwise(F.lit(0.0)).alias(name) for name in forecast_values],
        has_forecast.alias(HAS_FORECAST_COL))


def median_ratio(actual: str, forecast: str) -> Column:
    """The exact median of forecast / actual (scored rows have actual > 0): exact, so re-runs agree to the bit."""
    return F.median(F.col(forecast) / F.col(actual))


def complete(columns: list[str]) -> Column:
    """No null in the columns over the group: a score of only some of the rows would not compare."""
    return sum((F.sum(F.col(name).isNull().cast("long")) for name in columns), F.lit(0)) == 0


def quantile_scores(quantiles: list[str], coverage: str, loss: str) -> list[Column]:
    return [F.when(complete(quantiles), interval_coverage(ACTUAL_COL, quantiles[0], quantiles[-1])).alias(coverage),
            F.when(complete(quantiles), weighted_quantile_loss(ACTUAL_COL, quantiles, SCORED_LEVELS)).alias(loss)]


def scores() -> list[Column]:
    """The aggregates of a group of scored rows: rows, days, rows without a forecast row, exp-RMSPE and median
    forecast/actual ratio of the model and the baseline, and their quantile forecasts' interval coverage and
    weighted quantile loss."""
    # A baseline scored on only some of the rows would not compare with the model: none then.
    full_baseline = complete([BASELINE_COL])
    return [F.count(F.lit(1)).alias("rows"), F.countDistinct("Date").alias("days"),
            F.sum((~F.col(HAS_FORECAST_COL)).cast("long")).alias("rows_without_forecast"),
            rmspe(ACTUAL_COL, FORECAST_COL).alias(MODEL_RMSPE),
            F.when(full_baseline, rmspe(ACTUAL_COL, BASELINE_COL)).alias(BASELINE_RMSPE),
            median_ratio(ACTUAL_COL, FORECAST_COL).alias(MODEL_MEDIAN_RATIO),
            F.when(full_baseline, median_ratio(ACTUAL_COL, BASELINE_COL)).alias(BASELINE_MEDIAN_RATIO),
            *quantile_scores(MODEL_QUANTILES, MODEL_COVERAGE, MODEL_QUANTILE_LOSS),
            *quantile_scores(BASELINE_QUANTILES, BASELINE_COVERAGE, BASELINE_QUANTILE_LOSS)]


def grouped_scores(scored: DataFrame, groupings: dict[str, list[str]]) -> DataFrame:
    """Per grouping (name -> columns), KEY_COL and the grouping's columns: scores() of the scored rows, GROUPING_COL
    naming the grouping and the other groupings' columns null. Every grouping in one aggregation over one scan (each
    row is repeated once per grouping), not one query each: each query costs the same few stages whatever the rows,
    which is most of a day's scoring."""
    columns = list(dict.fromkeys(column for by in groupings.values() for column in by))
    kept = {column: f"_by_{column}" for column in columns}
    copies = F.explode(F.array(*[
        F.struct(F.lit(name).alias(GROUPING_COL),
                 *[(F.col(column) if column in by else F.lit(None).cast(scored.schema[column].dataType))
                   .alias(kept[column]) for column in columns])
        for name, by in groupings.items()]))
    rows = scored.select("*", copies.alias("_grouping")).select("*", "_grouping.*").drop("_grouping")
    return (rows.groupBy(GROUPING_COL, KEY_COL, *kept.values()).agg(*scores())
            .withColumnsRenamed({alias: column for column, alias in kept.items()}))


def recent_scores(scored: DataFrame, scoring_date: date, window_days: int) -> DataFrame:
    """One row: scores() and the number of forecasts over the scored rows (of every forecast) dated in the last
    window_days days up to scoring_date, whatever their lead day; rows 0 and null scores when there is none."""
    recent = scored.filter(F.col("Date") > F.lit(scoring_date - timedelta(days=window_days)))
    return recent.agg(F.countDistinct(KEY_COL).alias("forecasts"), *scores())
