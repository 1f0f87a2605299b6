"""The scores report: exp-RMSPE of model vs baseline by lead day and by forecast as-of date, one self-contained page.

The PNGs are embedded as data: URIs, so the single index.html object opens straight from S3 (a presigned link or
the console) with nothing else to fetch.
"""
from __future__ import annotations

import base64
import html
from datetime import date
from typing import Any

from rossmann_jobs.forecast.report import format_value, html_table, plt, png_bytes
from rossmann_jobs.forecast.score_records import SCORED, by_lead_day
from rossmann_jobs.forecast.scoring import BASELINE_RMSPE, MODEL_RMSPE

INDEX_HTML = "index.html"


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


def over_time_plot(entries: list[dict[str, Any]]) -> bytes:
    """exp-RMSPE of each scored forecast (its latest score) by its as-of date, model vs baseline."""
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


def _img(png: bytes, alt: str) -> str:
    return f'<img src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}" alt="{html.escape(alt)}">'


def index_html(summary: dict[str, Any]) -> bytes:
    """The whole report as one page with its plots inline."""
    entries = sorted(summary["forecasts"].values(), key=lambda e: (e["as_of"], e["run_id"]))
    scored = [e for e in entries if e["status"] == SCORED]
    overall = summary["overall"]
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(format_value(value))}</td>" for value in (
            e["as_of"], e["run_id"], e["status"], e["scoring_date"], e["days_scored"], e["rows"], e[MODEL_RMSPE],
            e[BASELINE_RMSPE])) + "</tr>" for e in entries)
    header = "".join(f"<th>{name}</th>" for name in ("as of", "run", "status", "scored with drop", "days", "rows",
                                                     "model exp-RMSPE", "baseline exp-RMSPE"))
    plots = (f"<h2>By lead day</h2>{_img(lead_day_plot(by_lead_day(summary)), 'exp-RMSPE by lead day')}"
             f"<h2>Over time</h2>{_img(over_time_plot(scored), 'exp-RMSPE by forecast as-of date')}"
             if scored else "<p>No forecast has actuals yet.</p>")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Rossmann forecast scores</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:4px 10px;text-align:left}}img{{max-width:100%}}</style></head>
<body>
<h1>Rossmann forecast scores: model vs naive seasonal baseline</h1>
{html_table([("scored through drop", summary["scored_through"]), ("forecasts scored", overall["forecasts_scored"]),
         ("rows scored (latest per forecast)", overall["rows"]), ("model exp-RMSPE (pooled)", overall[MODEL_RMSPE]),
         ("baseline exp-RMSPE (pooled)", overall[BASELINE_RMSPE]),
         ("pending (no actuals yet)", ", ".join(summary["pending"]) or "none")])}
{plots}
<h2>Forecasts</h2>
<table><tr>{header}</tr>{rows}</table>
</body></html>
"""
    return page.encode("utf-8")
