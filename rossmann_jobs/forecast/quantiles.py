"""Quantile forecasts: residual quantiles of the out-of-time validation window per lead week, applied to the horizon.

The validation window (the 48 days up to D, each row seen from its origin as the horizon is from D) gives, per lead
week, the model's out-of-time log residuals; a horizon row's P_q = forecast x exp(residual quantile q) of its lead
week (pooled_weeks where a week has too few rows). Only rows dated <= D are read. Three allowances, each measured
(docs/decisions.md): the trend's drift both ways (trend_at_origin: r - delta and r + delta), each week centred on
the point forecast (centred_table: P50 is the forecast), and each week's spread placed at every week's median of
the window in turn (residual_quantiles). The quantiles are exact (Spark's percentile, linear
interpolation like numpy's), so re-runs agree to the bit, and made non-crossing by a running maximum.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.features.point_in_time import (
    DRIFT,
    DRIFT_FROM,
    DRIFT_TO,
    WEEK_START,
    moved_by_season,
    newest_weeks,
    pooled_trend_series,
    reference_week_end,
    season_drift_table,
)

QUANTILE_LEVELS = (0.1, 0.5, 0.9)   # P10, P50, P90: the default; run_predict(quantile_levels=...) takes others
DAYS_PER_WEEK = 7
LEAD_WEEKS = 7                      # ceil(48 / 7): the daily contract's 48-day horizon
MIN_ROWS_PER_WEEK = 30              # fewer validation rows than this give a lead week's quantiles no footing
LEAD_WEEK_COL, RESIDUAL_COL = "LeadWeek", "LogResidual"
ORIGIN_FORECAST_COL = "LogSalesForecastFromOrigin"   # the log forecast of a validation row from its origin's trend
ORIGIN_WEEKS = 15                   # weeks back from the last that hold a validation row's origin (<= 96 days)
TREND_COLS = ("trend", "trend_de")  # the state's and Germany's Google trend: features/point_in_time.py
MODEL_PREFIX, BASELINE_PREFIX = "Sales", "SalesBaseline"   # SalesP10 (model), SalesBaselineP10 (naive baseline)
QUANTILES_CSV_KEYS = ["Id", "Date", "Store"]


def level_name(level: float) -> str:
    """'P10' for 0.1, 'P2.5' for 0.025."""
    return f"P{level * 100:g}"


def check_levels(levels: Iterable[float]) -> tuple[float, ...]:
    """The levels sorted, each strictly inside (0, 1) and listed once."""
    out = tuple(sorted(float(level) for level in levels))
    if not out or any(not 0 < level < 1 for level in out) or len(set(out)) != len(out):
        raise ValueError(f"quantile levels {list(levels)}: need distinct values strictly between 0 and 1")
    return out


def quantile_columns(levels: Sequence[float], prefix: str = MODEL_PREFIX) -> list[str]:
    return [f"{prefix}{level_name(level)}" for level in levels]


def lead_week(lead_days: Column) -> Column:
    """ceil(lead day / 7): 1 for lead days 1-7 ... 7 for 43-48; leads beyond the 48 days count as week 7."""
    return F.least(F.greatest(F.ceil(lead_days / DAYS_PER_WEEK), F.lit(1)), F.lit(LEAD_WEEKS)).cast("int")


def pooled_weeks(counts: dict[int, int], weeks: int = LEAD_WEEKS,
                 min_rows: int = MIN_ROWS_PER_WEEK) -> dict[int, tuple[int, int]]:
    """Per lead week 1..weeks, the span (first, last week) whose validation rows calibrate it: the week itself, or,
    while it holds fewer than min_rows rows, widened by one week on each side (all weeks at most)."""
    spans = {}
    for week in range(1, weeks + 1):
        first = last = week
        while (sum(counts.get(w, 0) for w in range(first, last + 1)) < min_rows
               and (first > 1 or last < weeks)):
            first, last = max(1, first - 1), min(weeks, last + 1)
        spans[week] = (first, last)
    return spans


def non_crossing(values: Sequence[float]) -> list[float]:
    """The running maximum of values ordered by level: a higher level's quantile never falls below a lower one's."""
    out, highest = [], -math.inf
    for value in values:
        highest = max(highest, value)
        out.append(highest)
    return out


def last_saturday(day: Column) -> Column:
    """The last Saturday on or before day (a googletrend.csv week ends on a Saturday)."""
    return F.date_sub(day, F.dayofweek(day) % 7)


def trend_at_origin(rows: DataFrame, history: DataFrame, lead_col: str) -> DataFrame:
    """rows (State, Date, lead_col and TREND_COLS) with TREND_COLS as strict point-in-time gives a row forecast from
    its origin (Date - lead days): per State, the last trend week that ended on or before the origin, moved by the
    season to the row's own week (point_in_time.season_drift_table, as prepare carries a week forward from D).
    history: State, Date and TREND_COLS of prepared rows dated <= D; a row of week W carries week W's values from
    reference_week_end onward, so the week ending on Saturday S is read from the rows whose reference_week_end is S. The
    season is learnt from the history's weeks a year or more before each row (the states' and Germany's pooled,
    as prepare pools the files), all ended long before the origin. A row whose origin's week no history row
    carries keeps its own values."""
    weeks = (history.groupBy("State", F.date_sub(reference_week_end(F.col("Date")), 6).alias(WEEK_START))
             .agg(*[F.max(name).alias(name) for name in TREND_COLS])
             .localCheckpoint())   # small; read twice below (collected for the season, joined for the origins)
    # Validation rows are dated D - 47 .. D with leads up to 48 days: their origins' weeks are the last 15.
    drift = season_drift_table(pooled_trend_series(weeks, weeks.select(WEEK_START, "trend_de").distinct()),
                               newest_weeks(ORIGIN_WEEKS))
    origin = weeks.select("State", F.col(WEEK_START).alias(DRIFT_FROM),
                          *[F.col(name).alias(f"_origin_{name}") for name in TREND_COLS])
    dated = rows.withColumns({DRIFT_FROM: F.date_sub(last_saturday(F.date_sub(F.col("Date"),
                                                                               F.col(lead_col).cast("int"))), 6),
                              DRIFT_TO: F.date_sub(reference_week_end(F.col("Date")), 6)})
    joined = (dated.join(F.broadcast(origin), ["State", DRIFT_FROM], "left")
              .join(F.broadcast(drift), [DRIFT_FROM, DRIFT_TO], "left"))
    return (joined.withColumns({name: F.coalesce(moved_by_season(F.col(f"_origin_{name}"), F.col(DRIFT),
                                                                 rows.schema[name].dataType), F.col(name))
                                for name in TREND_COLS})
            .select(*rows.columns))


def validation_residuals(validation: DataFrame, actual_col: str, log_forecast_col: str,
                         origin_forecast_col: str | None = None) -> DataFrame:
    """LEAD_WEEK_COL and RESIDUAL_COL = log(actual) - log(forecast) of validation predictions (actual > 0); with
    origin_forecast_col (the forecast from the origin's trend), two rows per prediction: the residual minus and
    plus delta = origin forecast - forecast, the trend's drift over the row's lead in either direction."""
    rows = validation.filter(F.col(actual_col) > 0)
    residual = F.log(F.col(actual_col)) - F.col(log_forecast_col)
    if origin_forecast_col is None:
        return rows.select(LEAD_WEEK_COL, residual.alias(RESIDUAL_COL))
    delta = F.col(origin_forecast_col) - F.col(log_forecast_col)
    return rows.select(LEAD_WEEK_COL, F.explode(F.array(residual - delta, residual + delta)).alias(RESIDUAL_COL))


def residual_quantiles(residuals: DataFrame, spans: dict[int, tuple[int, int]], levels: Sequence[float]) -> DataFrame:
    """LEAD_WEEK_COL + `_q` and `_median`: the exact residual quantiles at levels (in order) and the median over the
    rows of each week's span, each week's rows entering once per lead week of the window, moved from their week's
    median to that week's: the horizon week's common shock is not known at D, the window's weekly shocks say how
    large it may be, so the quantiles carry their spread (their sign does not carry over)."""
    spark = residuals.sparkSession
    mapping = spark.createDataFrame([(week, source) for week, (first, last) in spans.items()
                                     for source in range(first, last + 1)], "_week int, _source int")
    pooled = residuals.join(F.broadcast(mapping), F.col(LEAD_WEEK_COL) == F.col("_source"))
    medians = {row["_week"]: row["_median"] for row in pooled.groupBy("_week")
               .agg(F.percentile(RESIDUAL_COL, 0.5).alias("_median")).collect()}
    shifts = spark.createDataFrame([(week, float(medians[other] - medians[week]))
                                    for week in medians for other in medians], "_week int, _shift double")
    pooled = (pooled.join(F.broadcast(shifts), "_week")
              .withColumn(RESIDUAL_COL, F.col(RESIDUAL_COL) + F.col("_shift")))
    return (pooled.groupBy(F.col("_week").alias(LEAD_WEEK_COL))
            .agg(F.percentile(RESIDUAL_COL, list(levels)).alias("_q"), F.percentile(RESIDUAL_COL, 0.5).alias("_median"))
            .orderBy(LEAD_WEEK_COL))


def median_residual(residuals: DataFrame) -> float | None:
    """The exact median of all the residuals (every lead week): the model's bias over the window, reported and not
    applied (it does not carry over to the horizon); None without any."""
    return residuals.agg(F.percentile(RESIDUAL_COL, 0.5).alias("_median")).collect()[0]["_median"]


def quantile_table(collected: dict[int, Sequence[float] | None], levels: Sequence[float]) -> dict[int, list[float]]:
    """Per lead week 1..LEAD_WEEKS, the non-crossing residual quantiles; 0 (the point forecast) for a week without
    any validation residual (a features output without validation rows)."""
    return {week: non_crossing(collected.get(week) or [0.0] * len(levels)) for week in range(1, LEAD_WEEKS + 1)}


def centred_table(table: dict[int, list[float]], medians: dict[int, float | None]) -> dict[int, list[float]]:
    """Each week's quantiles moved by minus the week's median: its spread kept, centred on the point forecast (a
    shift keeps them non-crossing); a week without a median stays as it is."""
    return {week: [value - medians[week] for value in values] if medians.get(week) is not None
            else values for week, values in table.items()}


def with_quantiles(rows: DataFrame, table: dict[int, list[float]], levels: Sequence[float], forecast_col: str,
                   prefix: str = MODEL_PREFIX) -> DataFrame:
    """rows (with LEAD_WEEK_COL and forecast_col) + one column per level: forecast x exp(residual quantile of the
    row's lead week); 0 where the forecast is 0 (closed days), non-crossing since exp keeps the order."""
    out = rows
    for index, name in enumerate(quantile_columns(levels, prefix)):
        factors = F.create_map(*[F.lit(part) for week, values in sorted(table.items())
                                 for part in (week, math.exp(values[index]))])
        out = out.withColumn(name, (F.col(forecast_col) * factors[F.col(LEAD_WEEK_COL)]).cast("double"))
    return out


def quantiles_csv_bytes(rows: pd.DataFrame, levels: Sequence[float]) -> bytes:
    """forecast_quantiles.csv: Id, Date, Store, one column per level (P10, P50, P90), sorted by Id, two decimals.
    rows: Id, Date, StoreId and quantile_columns(levels)."""
    names = {column: level_name(level) for column, level in zip(quantile_columns(levels), levels)}
    out = rows.rename(columns={"StoreId": "Store", **names})[QUANTILES_CSV_KEYS + list(names.values())]
    out = out.assign(Date=pd.to_datetime(out["Date"]).dt.strftime("%Y-%m-%d")).sort_values("Id", kind="stable")
    return out.to_csv(index=False, float_format="%.2f").encode("utf-8")
