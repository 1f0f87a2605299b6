"""The naive seasonal baseline: median Sales per (store, day of week, promo) over the last 365 days up to a date.

Every forecast and every gate decision is compared with it: a model that cannot beat a per-store weekly median is
not worth shipping. It is fitted on prepared rows (StoreId raw, DayOfWeek and Promo as vocabulary indices of the
same prepare output, LABEL_COL = log(Sales) of rows with Sales > 0), so it only ever sees data dated up to the
window's end. Keys without history fall back to the store x promo median, then the store median, then the median
of all stores. Its quantiles (baseline_quantiles) are the empirical quantiles of the same cells, with the same
fallback: the naive interval every quantile forecast is scored against.
"""
from __future__ import annotations

from datetime import date, timedelta
from typing import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.features.spec import LABEL_COL, STORE_ID_COL

BASELINE_COL = "SalesBaseline"
WINDOW_DAYS = 365
# Most specific first; each level's median is the fallback of the one before it.
LEVELS = ([STORE_ID_COL, "DayOfWeek", "Promo"], [STORE_ID_COL, "Promo"], [STORE_ID_COL], [])


def history_window(history: DataFrame, end: date, days: int = WINDOW_DAYS) -> DataFrame:
    """The rows dated in (end - days, end]: never anything after end."""
    return history.filter(F.col("Date").between(F.lit(end - timedelta(days=days - 1)), F.lit(end)))


def seasonal_medians(history: DataFrame, end: date, days: int = WINDOW_DAYS) -> list[tuple[list[str], DataFrame]]:
    """Per level, the median log(Sales) of the window's rows: (keys, DataFrame of keys + median)."""
    window = history_window(history, end, days)
    return [(keys, window.groupBy(*keys).agg(F.median(LABEL_COL).alias(f"_median_{len(keys)}")))
            for keys in LEVELS]


def with_baseline(rows: DataFrame, medians: list[tuple[list[str], DataFrame]]) -> DataFrame:
    """rows + BASELINE_COL: exp(median log(Sales)) of the most specific level that has history for the row."""
    out = rows
    for keys, table in medians:
        out = out.join(F.broadcast(table), keys, "left") if keys else out.crossJoin(F.broadcast(table))
    level_medians = [F.col(f"_median_{len(keys)}") for keys, _table in medians]
    return (out.withColumn(BASELINE_COL, F.exp(F.coalesce(*level_medians)).cast("double"))
            .drop(*[f"_median_{len(keys)}" for keys, _table in medians]))


def baseline_forecast(rows: DataFrame, history: DataFrame, end: date, days: int = WINDOW_DAYS) -> DataFrame:
    """rows + BASELINE_COL fitted on history's window (end - days, end]."""
    return with_baseline(rows, seasonal_medians(history, end, days))


def seasonal_percentiles(history: DataFrame, end: date, levels: Sequence[float], days: int = WINDOW_DAYS
                         ) -> list[tuple[list[str], DataFrame]]:
    """Per level of LEVELS, the exact quantiles at `levels` of the window's log(Sales): (keys, keys + array)."""
    window = history_window(history, end, days)
    return [(keys, window.groupBy(*keys).agg(F.percentile(LABEL_COL, list(levels)).alias(f"_q_{len(keys)}")))
            for keys in LEVELS]


def baseline_quantiles(rows: DataFrame, history: DataFrame, end: date, levels: Sequence[float],
                       columns: Sequence[str], days: int = WINDOW_DAYS) -> DataFrame:
    """rows + one column per level (named by `columns`): exp of the quantile of log(Sales) of the most specific
    cell with history; all levels from the same cell, so they never cross."""
    out, tables = rows, seasonal_percentiles(history, end, levels, days)
    for keys, table in tables:
        out = out.join(F.broadcast(table), keys, "left") if keys else out.crossJoin(F.broadcast(table))
    chosen = F.coalesce(*[F.col(f"_q_{len(keys)}") for keys, _table in tables])
    out = out.withColumns({name: F.exp(chosen[index]).cast("double") for index, name in enumerate(columns)})
    return out.drop(*[f"_q_{len(keys)}" for keys, _table in tables])
