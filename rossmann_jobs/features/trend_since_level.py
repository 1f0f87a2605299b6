"""How far the Google trend moved since the window of a row's recent sales levels (pure DataFrame steps).

A row's StoreLevel144d (recent_level.py) is its store's sales over the 144 days up to its origin; those sales carry
the trend of those days. The raw trend of the row's own week says nothing of that window, so when the trend of the
weeks before the origin was unusually low (or high) the model reads the low level as the store's and forecasts low
(bench/RESULTS.md: 6.6 % low as of 2014-09-30, after a summer whose trend was 7 % below the autumn's). The columns
added here are the ratio of the row's trend to the trend's mean over the same 144 days up to the row's origin:
- TrendSinceLevel: the state's trend (googletrend.csv per state), by State;
- TrendDeSinceLevel: Germany's (Rossmann_DE).
The means are computed from the trend join tables, by calendar day, per origin block (the same blocks as the
levels'), so every mean reads days dated on or before the row's origin only (never after D), and in strict mode
the trend of a day is the one known at D (point_in_time.py). A row without such days, or whose trend is missing,
gets 1.0 (no known move).
"""
from __future__ import annotations

from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from rossmann_jobs.features.date_features import trend_key_year
from rossmann_jobs.features.recent_level import HORIZON_BLOCK, LEVEL_BLOCKS, origin_block
from rossmann_jobs.features.spec import TREND_SINCE_LEVEL_COLS

WINDOW_BLOCKS = LEVEL_BLOCKS[1]         # 144 days: StoreLevel144d's window
STATE_RATIO_COL, GERMANY_RATIO_COL = TREND_SINCE_LEVEL_COLS
# (ratio column, trend column): predict's quantiles move the ratio with the trend (forecast/quantiles.py).
RATIO_OF_TREND = {STATE_RATIO_COL: "trend", GERMANY_RATIO_COL: "trend_de"}

_BLOCK, _STATE_MEAN, _GERMANY_MEAN = "_trend_block", "_state_trend_mean", "_germany_trend_mean"


def add_trend_since_level(rows: DataFrame, trend_by_state: DataFrame, trend_germany: DataFrame, as_of: date,
                          iso_trend_keys: bool) -> DataFrame:
    """rows (State, Date, trend, trend_de) + TREND_SINCE_LEVEL_COLS (float). trend_by_state (State, Year, Week,
    trend) and trend_germany (Year, Week, trend_de): the join tables the rows met (joins.add_lookup_columns), with
    the same week keys (iso_trend_keys)."""
    means = trend_means_at_origins(trend_by_state, trend_germany, as_of, iso_trend_keys)
    joined = rows.withColumn(_BLOCK, origin_block(as_of)).join(F.broadcast(means), ["State", _BLOCK], "left")
    return joined.withColumns({STATE_RATIO_COL: ratio(F.col("trend"), F.col(_STATE_MEAN)),
                               GERMANY_RATIO_COL: ratio(F.col("trend_de"), F.col(_GERMANY_MEAN))}) \
        .drop(_BLOCK, _STATE_MEAN, _GERMANY_MEAN)


def ratio(value: Column, mean: Column) -> Column:
    """value / mean as float, 1.0 where either is missing or the mean is not positive."""
    return F.when(value.isNotNull() & (mean > 0), value / mean).otherwise(F.lit(1.0)).cast("float")


def trend_means_at_origins(trend_by_state: DataFrame, trend_germany: DataFrame, as_of: date,
                           iso_trend_keys: bool) -> DataFrame:
    """(State, block, state mean, Germany mean): per State and origin block (HORIZON_BLOCK .. the oldest), the mean
    trend and trend_de over the days of the WINDOW_BLOCKS blocks before the block (the 144 days up to its origin),
    each day meeting its week as a sales row of that day does. Small: states x blocks rows."""
    first_year = trend_by_state.agg(F.min("Year").alias("_first_year"))
    # A day of late December may key the next ISO year's first week: start a week before the first key year.
    days = first_year.select(F.explode(F.sequence(F.date_sub(F.make_date("_first_year", F.lit(1), F.lit(1)), 7),
                                                  F.lit(as_of))).alias("Date"))
    days = days.select(origin_block(as_of).alias(_BLOCK), trend_key_year(F.col("Date"), iso_trend_keys).alias("Year"),
                       F.weekofyear("Date").alias("Week"))
    state = (days.join(trend_by_state.select("State", "Year", "Week", "trend"), ["Year", "Week"])
             .groupBy("State", _BLOCK).agg(F.sum("trend").alias("_sum"), F.count("trend").alias("_n")))
    germany = (days.join(trend_germany.select("Year", "Week", "trend_de"), ["Year", "Week"])
               .groupBy(_BLOCK).agg(F.sum("trend_de").alias("_de_sum"), F.count("trend_de").alias("_de_n")))
    # Every state gets a row for each block from the horizon's to the oldest, so the windows below see them all.
    blocks = days.select(_BLOCK).union(first_year.select(F.lit(HORIZON_BLOCK).alias(_BLOCK))).distinct()
    grid = (trend_by_state.select("State").distinct().crossJoin(blocks)
            .join(state, ["State", _BLOCK], "left").join(germany, [_BLOCK], "left"))
    window = Window.partitionBy("State").orderBy(_BLOCK).rangeBetween(1, WINDOW_BLOCKS)
    return grid.select("State", _BLOCK,
                       (F.sum("_sum").over(window) / F.sum("_n").over(window)).alias(_STATE_MEAN),
                       (F.sum("_de_sum").over(window) / F.sum("_de_n").over(window)).alias(_GERMANY_MEAN))


def moved_with_trend(rows: DataFrame, before: dict[str, Column]) -> DataFrame:
    """rows whose trend columns were changed (e.g. to the trend the row's origin knew), with each ratio column moved
    by the same factor: the window's mean is the row's origin's either way. before: trend column -> its old value."""
    return rows.withColumns({
        ratio_col: F.when((before[trend_col] > 0) & F.col(trend_col).isNotNull(),
                          F.col(ratio_col) * F.col(trend_col) / before[trend_col])
                    .otherwise(F.col(ratio_col)).cast(rows.schema[ratio_col].dataType)
        for ratio_col, trend_col in RATIO_OF_TREND.items()})
