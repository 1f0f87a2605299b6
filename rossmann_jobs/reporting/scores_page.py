"""The scores report: exp-RMSPE, bias and interval calibration of model vs baseline by lead day/week and as-of date.

One self-contained page.

The PNGs are embedded as data: URIs, so the single index.html object opens straight from S3 (a presigned link or
the console) with nothing else to fetch.
"""
from __future__ import annotations

import html
from datetime import date
from typing import Any

from rossmann_jobs.past_forecasts.records import (
    BASELINE_COVERAGE,
    BASELINE_MEDIAN_RATIO,
    BASELINE_RMSPE,
    BIAS_ALERT_THRESHOLD,
    COVERAGE_TOLERANCE,
    MODEL_COVERAGE,
    MODEL_MEDIAN_RATIO,
    MODEL_RMSPE,
    RECENT,
    SCORED,
    UNDER_COVERING,
    by_lead_day,
    coverage_by_lead_week,
    interval_nominal,
    median_ratio_by_lead_week,
)
from rossmann_jobs.reporting.html import embedded_png, format_value, html_table, page, plt, png_bytes

UNBIASED_BAND = (1 - BIAS_ALERT_THRESHOLD, 1 + BIAS_ALERT_THRESHOLD)


def over_time_plot(entries: list[dict[str, Any]]) -> bytes:
    """exp-RMSPE of each scored forecast (score summary entries) by its as-of date, model vs baseline."""
    figure, axis = plt.subplots(figsize=(10, 4.5), constrained_layout=True)
    days = [date.fromisoformat(e["as_of"]) for e in entries]
    axis.plot(days, [e[MODEL_RMSPE] for e in entries], marker="o", color="tab:orange", label="model")
    axis.plot(days, [e[BASELINE_RMSPE] for e in entries], marker="o", color="tab:gray",
              label="naive seasonal baseline")
    axis.set_xlabel("forecast as-of date")
    axis.set_ylabel("exp-RMSPE")
    axis.set_title("Forecast error over time (each forecast's actuals known so far)", fontsize=10)
    axis.tick_params(axis="x", labelrotation=45, labelsize=8)
    axis.grid(alpha=0.3)
    axis.legend()
    return png_bytes(figure)


def accuracy_table(entries: list[dict[str, Any]]) -> str:
    """One row per score summary entry: which forecast, scored with which drop, model vs baseline."""
    header = "".join(f"<th>{name}</th>" for name in ("as of", "run", "status", "scored with drop", "days", "rows",
                                                     "model exp-RMSPE", "baseline exp-RMSPE"))
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(format_value(value))}</td>" for value in (
            e["as_of"], e["run_id"], e["status"], e["scoring_date"], e["days_scored"], e["rows"], e[MODEL_RMSPE],
            e[BASELINE_RMSPE])) + "</tr>" for e in entries)
    return f"<table><tr>{header}</tr>{rows}</table>"


def model_vs_baseline_plot(rows: list[tuple[int, int, float | None, float | None]], xlabel: str, ylabel: str,
                           title: str, unbiased_band: bool = False) -> bytes:
    """One line per forecast (model, naive baseline) over rows of (x, rows, model value, baseline value)."""
    figure, axis = plt.subplots(figsize=(10, 4.5), constrained_layout=True)
    xs = [row[0] for row in rows]
    if unbiased_band:
        axis.axhspan(*UNBIASED_BAND, color="tab:green", alpha=0.12,
                     label=f"{UNBIASED_BAND[0]:.2f}-{UNBIASED_BAND[1]:.2f}")
        axis.axhline(1.0, color="tab:green", linewidth=0.8)
        axis.set_xticks(xs)
    marker = "o" if unbiased_band else "."
    axis.plot(xs, [row[2] for row in rows], marker=marker, color="tab:orange", label="model")
    axis.plot(xs, [row[3] for row in rows], marker=marker, color="tab:gray", label="naive seasonal baseline")
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title, fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend()
    return png_bytes(figure)


def lead_day_plot(rows: list[tuple[int, int, float | None, float | None]]) -> bytes:
    """exp-RMSPE by lead day (days after the as-of date), model vs baseline, pooled over the scored forecasts."""
    return model_vs_baseline_plot(rows, "lead day (days after the forecast's as-of date)", "exp-RMSPE",
                                  "Forecast error by lead day, latest scores of every forecast")


def lead_week_ratio_plot(rows: list[tuple[int, int, float | None, float | None]]) -> bytes:
    """Median forecast/actual ratio by lead week, model vs baseline (median_ratio_by_lead_week), with the band of
    an unbiased forecast: a line above it forecasts too high on the typical day, below it too low."""
    return model_vs_baseline_plot(rows, "lead week (1: lead days 1-7 ... 7: lead days 43-48)",
                                  "median forecast / actual",
                                  "Bias by lead week: median over the scored forecasts of each one's median ratio",
                                  unbiased_band=True)


def calibration_plot(rows: list[tuple], nominal: float) -> bytes:
    """Observed coverage of the interval by lead week (coverage_by_lead_week), model vs naive baseline quantiles,
    against the nominal coverage and its tolerance band; beside it the weighted quantile loss by lead week."""
    figure, (coverage, loss) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    weeks = [row[0] for row in rows]
    coverage.axhspan(nominal - COVERAGE_TOLERANCE, nominal + COVERAGE_TOLERANCE, color="tab:green", alpha=0.12,
                     label=f"nominal {nominal:.0%} +- {COVERAGE_TOLERANCE:.0%}")
    coverage.axhline(nominal, color="tab:green", linewidth=0.8)
    for axis, (model, baseline), ylabel in ((coverage, (2, 3), "observed coverage of the interval"),
                                            (loss, (4, 5), "weighted quantile loss (lower is better)")):
        axis.plot(weeks, [row[model] for row in rows], marker="o", color="tab:orange", label="model")
        axis.plot(weeks, [row[baseline] for row in rows], marker="o", color="tab:gray",
                  label="naive seasonal baseline quantiles")
        axis.set_xticks(weeks)
        axis.set_xlabel("lead week (1: lead days 1-7 ... 7: lead days 43-48)")
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    coverage.set_ylim(0, 1)
    coverage.set_title("Calibration: nominal vs observed coverage by lead week", fontsize=10)
    loss.set_title("Quantile loss by lead week", fontsize=10)
    return png_bytes(figure)


def recent_rows(recent: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """The summary table's lines of the recent check (the last days up to the latest scoring date)."""
    if recent is None:
        return [("recent days", "not checked yet")]
    label = f"last {recent['window_days']} days ({recent['dates']['start']} to {recent['dates']['end']})"
    return [(f"{label}: rows (forecasts, days)", f"{recent['rows']} ({recent['forecasts']}, {recent['days']})"),
            (f"{label}: model exp-RMSPE", recent[MODEL_RMSPE]),
            (f"{label}: baseline exp-RMSPE", recent[BASELINE_RMSPE]),
            (f"{label}: model median forecast/actual", recent[MODEL_MEDIAN_RATIO]),
            (f"{label}: baseline median forecast/actual", recent[BASELINE_MEDIAN_RATIO]),
            (f"{label}: model interval coverage", recent.get(MODEL_COVERAGE)),
            (f"{label}: baseline interval coverage", recent.get(BASELINE_COVERAGE))]


def index_html(summary: dict[str, Any]) -> bytes:
    """The whole report as one page with its plots inline."""
    entries = sorted(summary["forecasts"].values(), key=lambda e: (e["as_of"], e["run_id"]))
    scored = [e for e in entries if e["status"] == SCORED]
    overall, nominal = summary["overall"], interval_nominal(summary)
    totals = html_table([
        ("scored through drop", summary["scored_through"]), ("forecasts scored", overall["forecasts_scored"]),
        ("rows scored (latest per forecast)", overall["rows"]), ("model exp-RMSPE (pooled)", overall[MODEL_RMSPE]),
        ("baseline exp-RMSPE (pooled)", overall[BASELINE_RMSPE]),
        ("nominal coverage of the quantile interval", nominal),
        ("model interval coverage (pooled)", overall.get(MODEL_COVERAGE)),
        ("baseline interval coverage (pooled)", overall.get(BASELINE_COVERAGE)),
        ("forecasts whose interval is under-covering", ", ".join(
            f"{e['as_of']} {e['run_id']}" for e in scored if e.get("interval_verdict") == UNDER_COVERING) or "none"),
        *recent_rows(summary.get(RECENT)),
        ("pending (no actuals yet)", ", ".join(summary["pending"]) or "none")])
    if scored:
        plots = [("By lead day", embedded_png(lead_day_plot(by_lead_day(summary)), "exp-RMSPE by lead day")),
                 ("Bias by lead week", embedded_png(lead_week_ratio_plot(median_ratio_by_lead_week(summary)),
                                                    "median forecast/actual ratio by lead week")),
                 ("Over time", embedded_png(over_time_plot(scored), "exp-RMSPE by forecast as-of date"))]
        calibration = coverage_by_lead_week(summary)
        if calibration and nominal:
            plots.append(("Calibration of the quantile forecasts by lead week",
                          embedded_png(calibration_plot(calibration, nominal),
                                       "interval coverage and quantile loss by lead week")))
    else:
        plots = [("Plots", "<p>No forecast has actuals yet.</p>")]
    return page("Rossmann forecast scores: model vs naive seasonal baseline",
                [("Summary", totals), *plots, ("Forecasts", accuracy_table(entries))]).encode("utf-8")
