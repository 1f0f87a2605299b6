"""The quantile forecasts' calibration: residual quantiles per lead week from the validation predictions (Spark)."""
from __future__ import annotations

import logging

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.forecast import quantiles
from rossmann_jobs.forecast.metrics import ACTUAL_COL
from rossmann_jobs.model.broadcast import LOG_FORECAST_COL

log = logging.getLogger("rossmann.predict")


def calibrate_quantiles(validation_rows: DataFrame, levels: tuple[float, ...],
                        from_origin: DataFrame | None = None) -> tuple[dict[int, list[float]], dict]:
    """(per lead week the non-crossing residual quantiles at levels, what the summary says of them) from the
    validation predictions (out of time, all dated <= the as-of date); sparse lead weeks pooled with neighbours.
    from_origin (StoreId, Date, ORIGIN_FORECAST_COL: predictions.origin_forecasts) adds the trend's drift over
    the lead in either direction (quantiles.validation_residuals)."""
    origin_col = None if from_origin is None else quantiles.ORIGIN_FORECAST_COL
    rows = (validation_rows if from_origin is None
            else validation_rows.join(from_origin, ["StoreId", "Date"], "left")).filter(F.col(ACTUAL_COL) > 0)
    delta = (F.lit(None).cast("double") if origin_col is None
             else F.abs(F.col(origin_col) - F.col(LOG_FORECAST_COL)))
    stats = {row[quantiles.LEAD_WEEK_COL]: (row["count"], row["drift"])
             for row in rows.groupBy(quantiles.LEAD_WEEK_COL).agg(F.count(F.lit(1)).alias("count"),
                                                                  F.avg(delta).alias("drift")).collect()}
    counts = {week: count for week, (count, _drift) in stats.items()}
    residuals = quantiles.validation_residuals(rows, ACTUAL_COL, LOG_FORECAST_COL, origin_col)
    spans = quantiles.pooled_weeks(counts)
    weekly = quantiles.residual_quantiles(residuals, spans, levels).collect()
    window_bias = quantiles.median_residual(residuals)
    table = quantiles.centred_table(
        quantiles.quantile_table({row[quantiles.LEAD_WEEK_COL]: row["_q"] for row in weekly}, levels),
        {row[quantiles.LEAD_WEEK_COL]: row["_median"] for row in weekly})
    pooled = {week: list(span) for week, span in spans.items() if span != (week, week)}
    if pooled:
        log.warning("lead week(s) with fewer than %d validation rows calibrated on neighbouring weeks: %s",
                    quantiles.MIN_ROWS_PER_WEEK, pooled)
    method = ("validation residual quantiles per lead week, each week's spread at every week's median, "
              "centred on the point forecast")
    summary = {"levels": list(levels),
               "method": method if origin_col is None else f"{method}, +- the trend's drift from the rows' origin",
               "median_log_residual": None if window_bias is None else round(window_bias, 6),   # reported only
               "validation_rows_by_lead_week": {str(week): counts.get(week, 0) for week in sorted(table)},
               "trend_drift_by_lead_week": {str(week): None if stats.get(week, (0, None))[1] is None
                                            else round(stats[week][1], 6) for week in sorted(table)},
               "pooled_lead_weeks": {str(week): span for week, span in pooled.items()},
               "min_rows_per_lead_week": quantiles.MIN_ROWS_PER_WEEK,
               "log_residual_quantiles_by_lead_week": {str(week): [round(v, 6) for v in values]
                                                       for week, values in table.items()}}
    return table, summary
