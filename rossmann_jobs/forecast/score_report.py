"""The scores report: exp-RMSPE of model vs baseline by lead day and by forecast as-of date, one self-contained page.

The PNGs are embedded as data: URIs, so the single index.html object opens straight from S3 (a presigned link or
the console) with nothing else to fetch.
"""
from __future__ import annotations

from typing import Any

from rossmann_jobs.forecast.report import accuracy_table, embedded_png, html_table, over_time_plot, page, plt, png_bytes
from rossmann_jobs.forecast.score_records import SCORED, by_lead_day
from rossmann_jobs.forecast.scoring import BASELINE_RMSPE, MODEL_RMSPE


def lead_day_plot(rows: list[tuple[int, int, float | None, float | None]]) -> bytes:
    """exp-RMSPE by lead day (days after the as-of date), model vs baseline, pooled over the scored forecasts."""
    figure, axis = plt.subplots(figsize=(10, 4.5), constrained_layout=True)
    leads = [row[0] for row in rows]
    axis.plot(leads, [row[2] for row in rows], marker=".", color="tab:orange", label="model")
    axis.plot(leads, [row[3] for row in rows], marker=".", color="tab:gray", label="naive seasonal baseline")
    axis.set_xlabel("lead day (days after the forecast's as-of date)")
    axis.set_ylabel("exp-RMSPE")
    axis.set_title("Forecast error by lead day, latest scores of every forecast", fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend()
    return png_bytes(figure)


def index_html(summary: dict[str, Any]) -> bytes:
    """The whole report as one page with its plots inline."""
    entries = sorted(summary["forecasts"].values(), key=lambda e: (e["as_of"], e["run_id"]))
    scored = [e for e in entries if e["status"] == SCORED]
    overall = summary["overall"]
    totals = html_table([
        ("scored through drop", summary["scored_through"]), ("forecasts scored", overall["forecasts_scored"]),
        ("rows scored (latest per forecast)", overall["rows"]), ("model exp-RMSPE (pooled)", overall[MODEL_RMSPE]),
        ("baseline exp-RMSPE (pooled)", overall[BASELINE_RMSPE]),
        ("pending (no actuals yet)", ", ".join(summary["pending"]) or "none")])
    if scored:
        plots = [("By lead day", embedded_png(lead_day_plot(by_lead_day(summary)), "exp-RMSPE by lead day")),
                 ("Over time", embedded_png(over_time_plot(scored), "exp-RMSPE by forecast as-of date"))]
    else:
        plots = [("Plots", "<p>No forecast has actuals yet.</p>")]
    return page("Rossmann forecast scores: model vs naive seasonal baseline",
                [("Summary", totals), *plots, ("Forecasts", accuracy_table(entries))]).encode("utf-8")
