"""The forecast report: PNG plots (matplotlib Agg) of small aggregated frames and an HTML page tying them together."""
from __future__ import annotations

import html
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)
import pandas as pd  # noqa: E402

ACTUAL, FORECAST = "SalesActual", "SalesForecast"
OVERALL_PNG, STORES_PNG, HORIZON_PNG = "validation_overall.png", "validation_stores.png", "forecast_horizon.png"
INDEX_HTML = "index.html"


def pick_stores(store_totals: pd.DataFrame, count: int = 4) -> list[int]:
    """Stores spread over the range of total actual sales (largest, middle ones, smallest), deterministic."""
    ranked = store_totals.sort_values([ACTUAL, "StoreId"], ascending=[False, True])["StoreId"].tolist()
    if len(ranked) <= count:
        return ranked
    positions = sorted({round(i * (len(ranked) - 1) / (count - 1)) for i in range(count)})
    return [int(ranked[p]) for p in positions]


def png_bytes(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def _actual_vs_forecast(axis, daily: pd.DataFrame, title: str) -> None:
    axis.plot(daily["Date"], daily[ACTUAL], label="actual", color="tab:blue", marker=".")
    axis.plot(daily["Date"], daily[FORECAST], label="forecast", color="tab:orange", marker=".")
    axis.set_title(title, fontsize=10)
    axis.tick_params(axis="x", labelrotation=45, labelsize=8)
    axis.grid(alpha=0.3)


def overall_plot(daily: pd.DataFrame, rmspe: float | None) -> bytes:
    """Total actual vs forecast sales per day over the validation window."""
    figure, axis = plt.subplots(figsize=(10, 4.5), constrained_layout=True)
    _actual_vs_forecast(axis, daily, f"All stores, validation window (exp-RMSPE {format_value(rmspe)})")
    axis.set_ylabel("sales per day, all stores")
    axis.legend()
    return png_bytes(figure)


def stores_plot(daily_by_store: pd.DataFrame, store_rmspe: dict[int, float]) -> bytes:
    """One panel per chosen store: actual vs forecast per day over the validation window."""
    stores = list(dict.fromkeys(daily_by_store["StoreId"]))
    columns = 2 if len(stores) > 1 else 1
    rows = max(1, -(-len(stores) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 3.5 * rows), squeeze=False,
                                constrained_layout=True)
    for axis, store in zip(axes.flat, stores):
        daily = daily_by_store[daily_by_store["StoreId"] == store]
        _actual_vs_forecast(axis, daily, f"Store {store} (exp-RMSPE {format_value(store_rmspe.get(store))})")
    for axis in list(axes.flat)[len(stores):]:
        axis.axis("off")
    axes.flat[0].legend()
    return png_bytes(figure)


def horizon_plot(daily: pd.DataFrame) -> bytes:
    """Total forecast sales per day over the horizon, with the number of open stores."""
    figure, axis = plt.subplots(figsize=(10, 4.5), constrained_layout=True)
    axis.bar(daily["Date"], daily[FORECAST], color="tab:orange", label="forecast sales, all stores")
    axis.set_ylabel("forecast sales per day")
    axis.tick_params(axis="x", labelrotation=45, labelsize=8)
    stores_axis = axis.twinx()
    stores_axis.plot(daily["Date"], daily["OpenStores"], color="tab:green", marker=".", label="open stores")
    stores_axis.set_ylabel("open stores")
    stores_axis.set_ylim(bottom=0)
    axis.set_title("Forecast horizon")
    handles = axis.get_legend_handles_labels()[0] + stores_axis.get_legend_handles_labels()[0]
    axis.legend(handles, [h.get_label() for h in handles], loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    return png_bytes(figure)


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {format_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return " to ".join(format_value(v) for v in value)
    return "n/a" if value is None else str(value)


def html_table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(format_value(v))}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def index_html(title: str, metrics: list[tuple[str, Any]], worst_stores: pd.DataFrame, model_info: list[tuple[str, Any]]
               ) -> str:
    """A self-contained page; the plots are referenced relatively so the folder can be copied anywhere."""
    worst = html_table([(f"Store {int(r.StoreId)}", r.rmspe) for r in worst_stores.itertuples()])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:4px 10px;text-align:left}}img{{max-width:100%}}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<h2>Run metrics</h2>
{html_table(metrics)}
<h2>Validation window: forecast vs actual, all stores</h2>
<img src="{OVERALL_PNG}" alt="total forecast vs actual sales per day on the validation window">
<h2>Validation window: forecast vs actual, selected stores</h2>
<img src="{STORES_PNG}" alt="forecast vs actual sales per day for selected stores">
<h2>Forecast horizon</h2>
<img src="{HORIZON_PNG}" alt="total forecast sales per day over the horizon">
<h2>Stores with the largest validation error (exp-RMSPE)</h2>
{worst}
<h2>Model</h2>
{html_table(model_info)}
</body></html>
"""
