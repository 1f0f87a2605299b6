"""The naive seasonal baseline: median Sales per (store, day of week, promo) over the last 365 days up to a date.

Every forecast and every gate decision is compared with it: a model that cannot beat a per-store weekly median is
not worth shipping. It is fitted on prepared rows (StoreId raw, DayOfWeek and Promo as vocabulary indices of the
same prepare output, LABEL_COL = log(Sales) of rows with Sales > 0), so it only ever sees data dated up to the
window's end. Keys without history fall back to the store x promo median, then the store median, then the median
of all stores. Its quantiles (baseline_forecast's `levels`) are the empirical quantiles of the same cells, with the
same fallback: the naive interval every quantile forecast is scored against. One rollup computes every level's
cells in one pass over the window.
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


def seasonal_cells(history: DataFrame, end: date, levels: Sequence[float] = (), days: int = WINDOW_DAYS
                   ) -> DataFrame:
    """One aggregation over the window's rows for every level of LEVELS at once (a rollup): per cell, the exact
    quantiles at [0.5, *levels] of log(Sales) (_q) and which level the cell belongs to (_level, Spark's
    grouping_id). Materialized: it is small (a few rows per store) and every level's join reads it."""
    window = history_window(history, end, days)
    return (window.rollup(STORE_ID_COL, "Promo", "DayOfWeek")
            .agg(F.percentile(LABEL_COL, [0.5, *levels]).alias("_q"), F.grouping_id().alias("_level"))
            .localCheckpoint())


def level_id(keys: list[str]) -> int:
    """grouping_id of the rollup over (StoreId, Promo, DayOfWeek) whose cells are keyed by `keys`: one bit per
    rolled-up column, the first column's bit highest."""
    return sum(1 << (2 - position) for position, column in enumerate((STORE_ID_COL, "Promo", "DayOfWeek"))
               if column not in keys)


def baseline_forecast(rows: DataFrame, history: DataFrame, end: date, days: int = WINDOW_DAYS,
                      levels: Sequence[float] = (), columns: Sequence[str] = ()) -> DataFrame:
    """rows + BASELINE_COL, exp(median log(Sales)) of the most specific cell with history in the window
    (end - days, end], and one column per quantile level (named by `columns`): exp of the cell's quantile. All from
    the same cell, so the quantiles never cross."""
    out, cells = rows, seasonal_cells(history, end, levels, days)
    for keys in LEVELS:
        table = cells.filter(F.col("_level") == level_id(keys)).select(*keys, F.col("_q").alias(f"_q_{len(keys)}"))
        # A left join for the all-stores cell too: a window without rows has no cell at all (a rollup of nothing
        # is empty), and the rows must stay, without a baseline.
        out = out.join(F.broadcast(table), keys if keys else F.lit(True), "left")
    chosen = F.coalesce(*[F.col(f"_q_{len(keys)}") for keys in LEVELS])
    out = out.withColumns({name: F.exp(chosen[index]).cast("double")
                           for index, name in enumerate([BASELINE_COL, *columns])})
    return out.drop(*[f"_q_{len(keys)}" for keys in LEVELS])
