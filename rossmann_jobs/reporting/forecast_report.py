"""The forecast report assembled: Spark aggregates of the predictions, the run's facts, one index.html
(forecast_page)."""
from __future__ import annotations

import html
import logging
from datetime import date

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs import storage
from rossmann_jobs.features.drop_settings import UNVERIFIED_DROP_WARNING
from rossmann_jobs.features.spec import LABEL_COL
from rossmann_jobs.forecast import metrics, quantiles
from rossmann_jobs.forecast.baseline import BASELINE_COL
from rossmann_jobs.forecast.metrics import ACTUAL_COL, FORECAST_COL
from rossmann_jobs.forecast.open_flag import is_forecast
from rossmann_jobs.output_layout import SCORES_SUMMARY_FILE, TRAIN_METRICS_FILE, TRAINING_CURVES_FILE
from rossmann_jobs.past_forecasts import records as score_records
from rossmann_jobs.reporting import forecast_page

log = logging.getLogger("rossmann.predict")

WORST_STORES = 5


def report_metrics(validation_rmspe: float | None, counts: dict[str, int], metadata: dict, submission: pd.DataFrame,
                   quantile_summary: dict, features_attempt: str, model_attempt: str) -> list[tuple[str, object]]:
    """The report's run metrics: the date, horizon and totals first, then rows, windows, the drop, features and
    model, and last the quantiles' calibration."""
    return [("as of", metadata.get("as_of")), ("horizon", metadata.get("test_window")),
            ("total forecast sales", float(submission["Sales"].sum())),
            ("total naive seasonal baseline sales", float(submission[BASELINE_COL].sum())),
            ("validation exp-RMSPE", validation_rmspe), ("validation rows", counts["validation"]),
            ("validation window", metadata.get("validation_window")),
            ("test rows", counts["test"]), ("forecast (open) rows", counts["forecast"]),
            ("of which blank Open (treated as open)", counts["blank_open"]),
            ("closed rows (Sales 0)", counts["closed"]),
            ("raw drop", drop_verification(metadata)),
            ("features", features_attempt), ("model", model_attempt),
            ("quantile levels", quantile_summary["levels"]),
            ("validation rows per lead week 1..7 (their residuals calibrate the quantiles)",
             ", ".join(str(n) for n in quantile_summary["validation_rows_by_lead_week"].values())),
            ("mean |trend drift| per lead week 1..7 (log; widens the quantiles both ways)",
             ", ".join("-" if v is None else f"{v:.3f}"
                       for v in quantile_summary["trend_drift_by_lead_week"].values())),
            ("lead weeks pooled with neighbours (too few rows)",
             ", ".join(f"{week}: weeks {span[0]}-{span[1]}"
                       for week, span in quantile_summary["pooled_lead_weeks"].items()) or "none")]


def drop_verification(metadata: dict) -> str:
    """The report's line on the drop: verified against its manifest, or not (a drop closed by an empty marker)."""
    if metadata.get("drop_verified"):
        return "verified against its _SUCCESS manifest; test.csv checked against prepare's SHA-256"
    return (f"NOT verified: {UNVERIFIED_DROP_WARNING} (the drop's _SUCCESS marker held none; allowed by the "
            "allow_unverified_drop setting); test.csv checked against prepare's SHA-256")


def model_info(artifact: dict, training_metrics: dict | None) -> list[tuple[str, object]]:
    """The scalar facts of the artifact (and training metrics) for the report, whatever their names."""
    rows = [(f"artifact: {k}", v) for k, v in sorted(artifact.items()) if isinstance(v, (str, int, float, bool))]
    rows += [(f"training: {k}", v) for k, v in sorted((training_metrics or {}).items())
             if isinstance(v, (str, int, float, bool))]
    return rows


def read_report_context(trained_model_uri: str, scores_uri: str, as_of: date,
                        training_metrics: dict | None, model_attempt: str | None) -> dict:
    """What the report shows beyond this job's own rows: the run's trained model's metrics.json (gate scores,
    epochs; else the forecasting model's; model_attempt None: the naive fallback, no model) and the training curves
    its train job drew beside it (reused, not drawn again), and the earlier forecasts' scores known by as_of."""
    training_attempt, training = model_attempt, training_metrics
    training_uri = storage.join(training_attempt, TRAIN_METRICS_FILE) if training_attempt else None
    if trained_model_uri:
        training_attempt = storage.committed_uri(trained_model_uri)
        training_uri = storage.join(training_attempt, TRAIN_METRICS_FILE)
        training = storage.read_json(training_uri) if storage.exists(training_uri) else None
    curves_uri = storage.join(training_attempt, TRAINING_CURVES_FILE) if training_attempt else None
    curves = storage.read_bytes(curves_uri) if training and curves_uri and storage.exists(curves_uri) else None
    summary_uri = storage.join(scores_uri, SCORES_SUMMARY_FILE) if scores_uri else None
    summary = storage.read_json(summary_uri) if summary_uri and storage.exists(summary_uri) else None
    return {"training": training, "training_uri": training_uri, "training_curves": curves,
            "accuracy": score_records.scored_as_of(summary, as_of)}


def last_year_actuals(history: DataFrame | None, horizon: DataFrame) -> DataFrame | None:
    """Per row of horizon (StoreId, Date), the actual sales 364 days before it (the same weekday) from the prepared
    history rows (StoreId, Date, LABEL_COL = log(Sales); days without sales have no row) as LAST_YEAR, dated on the
    horizon's day; None without history."""
    if history is None:
        return None
    before = (history.select("StoreId", F.date_add("Date", forecast_page.LAST_YEAR_DAYS).alias("Date"),
                             F.exp(F.col(LABEL_COL)).alias(forecast_page.LAST_YEAR)))
    return horizon.select("StoreId", "Date").join(before, ["StoreId", "Date"])


def fan_note(levels: tuple[str, str, str], found: int, days: int) -> str:
    """What the fan chart draws, and whether last year's same weeks were found."""
    low, mid, high = levels
    seen = (f"found for {found} of the {days} store-days shown" if found else
            "none found: the prepared history holds no sales 364 days before these days, so last year's same weeks "
            "are not drawn")
    return (f"<p>The band: the {html.escape(low)}-{html.escape(high)} quantile forecast of each day; the line: "
            f"{html.escape(mid)}; dashed grey: the naive seasonal baseline; purple: last year's same weeks, the "
            f"actual sales 364 days earlier (the same weekday) from the prepared history, {seen}.</p>")


def write_report(test: DataFrame, validation: DataFrame, report_uri: str, run_metrics: list[tuple[str, object]],
                 info: list[tuple[str, object]], validation_rmspe: float | None, context: dict,
                 gate_decision: str, levels: tuple[float, ...] = quantiles.QUANTILE_LEVELS,
                 title: str | None = None, history: DataFrame | None = None) -> None:
    """Aggregate in Spark, plot the small results on the driver, write the one self-contained index.html
    (history: the prepared train + validation rows, for last year's same weeks in the fan chart)."""
    store_totals = metrics.per_store(validation).toPandas()
    chosen = forecast_page.pick_stores(store_totals)
    daily = metrics.daily_totals(validation, [ACTUAL_COL, FORECAST_COL]).toPandas()
    by_store = metrics.daily_totals(validation.filter(F.col("StoreId").isin(chosen)), [ACTUAL_COL, FORECAST_COL],
                                    by=["StoreId"]).toPandas()
    horizon = (test.groupBy("Date")
               .agg(F.sum(FORECAST_COL).alias(FORECAST_COL), F.sum(is_forecast().cast("int")).alias("OpenStores"))
               .orderBy("Date").toPandas())
    store_rmspe = dict(zip(store_totals["StoreId"].astype(int), store_totals["rmspe"]))
    worst = store_totals.dropna(subset=["rmspe"]).sort_values(["rmspe", "StoreId"], ascending=[False, True])
    # The fan: the outer levels as the band, the median (else the point forecast) as the line; short names.
    short = {name: quantiles.level_name(level) for name, level in zip(quantiles.quantile_columns(levels), levels)}
    low, high = list(short)[0], list(short)[-1]
    mid = next((name for name, label in short.items() if label == "P50"), FORECAST_COL)
    fan_rows = test.filter(F.col("StoreId").isin(chosen) & is_forecast())
    fan = (fan_rows.select("StoreId", "Date", *dict.fromkeys([low, mid, high]), BASELINE_COL).toPandas()
           .rename(columns=short))
    fan_actuals = validation.filter(F.col("StoreId").isin(chosen)).select("StoreId", "Date", ACTUAL_COL).toPandas()
    last_year = last_year_actuals(None if history is None else history.filter(F.col("StoreId").isin(chosen)),
                                  fan_rows)
    last_year = None if last_year is None else last_year.toPandas()
    names = (short[low], short.get(mid, mid), short[high])
    fan_plot = (f"Forecast horizon: {short[low]}-{short[high]} fan, selected stores",
                forecast_page.fan_chart(fan_actuals, fan, *names, last_year=last_year),
                fan_note(names, 0 if last_year is None else len(last_year), len(fan)))
    plots = [("Forecast horizon", forecast_page.horizon_plot(horizon)),
             ("Validation window: forecast vs actual, all stores", forecast_page.overall_plot(daily, validation_rmspe)),
             ("Validation window: forecast vs actual, selected stores",
              forecast_page.stores_plot(by_store, store_rmspe))]
    text = forecast_page.forecast_page(title or "Rossmann sales forecast", run_metrics, fan_plot, plots,
                                       worst.head(WORST_STORES), info, gate_decision=gate_decision or None, **context)
    storage.write_bytes(report_uri, text.encode("utf-8"))
