"""The forecast report's page: PNG plots of small aggregated frames in one self-contained page (reporting/html.py)."""
from __future__ import annotations

import html
from typing import Any

import pandas as pd

from rossmann_jobs.reporting.html import embedded_png, format_value, html_table, page, plt, png_bytes
from rossmann_jobs.reporting.scores_page import accuracy_table, over_time_plot
from rossmann_jobs.reporting.training_curves import training_curves_png

ACTUAL, FORECAST = "SalesActual", "SalesForecast"
BASELINE, LAST_YEAR = "SalesBaseline", "SalesLastYear"
LAST_YEAR_DAYS = 364   # the same weekday a year earlier

# The quality gate's three forecasts on the same validation rows (rossmann_jobs/gate_scores.py).
GATE_FORECASTS = (("challenger", "this run's model", "tab:orange"), ("champion", "champion as of the date", "tab:blue"),
                  ("baseline", "naive seasonal baseline", "tab:gray"))


def pick_stores(store_totals: pd.DataFrame, count: int = 4) -> list[int]:
    """Stores spread over the range of total actual sales (largest, middle ones, smallest), deterministic."""
    ranked = store_totals.sort_values([ACTUAL, "StoreId"], ascending=[False, True])["StoreId"].tolist()
    if len(ranked) <= count:
        return ranked
    positions = sorted({round(i * (len(ranked) - 1) / (count - 1)) for i in range(count)})
    return [int(ranked[p]) for p in positions]


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


def store_panels(stores: list) -> tuple[Any, list]:
    """A figure of one panel per store, two columns when there are several: (figure, the stores' axes); panels
    left over in the last row are switched off."""
    columns = 2 if len(stores) > 1 else 1
    rows = max(1, -(-len(stores) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 3.5 * rows), squeeze=False,
                                constrained_layout=True)
    for axis in list(axes.flat)[len(stores):]:
        axis.axis("off")
    return figure, list(axes.flat)


def stores_plot(daily_by_store: pd.DataFrame, store_rmspe: dict[int, float]) -> bytes:
    """One panel per chosen store: actual vs forecast per day over the validation window."""
    stores = list(dict.fromkeys(daily_by_store["StoreId"]))
    figure, axes = store_panels(stores)
    for axis, store in zip(axes, stores):
        daily = daily_by_store[daily_by_store["StoreId"] == store]
        _actual_vs_forecast(axis, daily, f"Store {store} (exp-RMSPE {format_value(store_rmspe.get(store))})")
    axes[0].legend()
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


def fan_chart(actuals: pd.DataFrame, horizon: pd.DataFrame, low: str, mid: str, high: str,
              last_year: pd.DataFrame | None = None) -> bytes:
    """One panel per store: the validation window's actual sales (up to the as-of date), then the horizon's `mid`
    quantile forecast as a line in the band from `low` to `high` (columns of horizon: StoreId, Date and those), with
    the naive seasonal baseline (horizon's BASELINE column, where it has one) and last year's same weeks (last_year:
    StoreId, Date (a horizon date) and LAST_YEAR, the actual sales 364 days before it, the same weekday)."""
    stores = list(dict.fromkeys(horizon["StoreId"]))
    figure, axes = store_panels(stores)
    for axis, store in zip(axes, stores):
        past = actuals[actuals["StoreId"] == store].sort_values("Date")
        ahead = horizon[horizon["StoreId"] == store].sort_values("Date")
        axis.plot(past["Date"], past[ACTUAL], color="tab:blue", marker=".", label="actual (validation window)")
        if last_year is not None:
            before = last_year[last_year["StoreId"] == store].sort_values("Date")
            axis.plot(before["Date"], before[LAST_YEAR], color="tab:purple", marker=".", linewidth=0.8,
                      label="actual 364 days earlier")
        axis.fill_between(ahead["Date"], ahead[low], ahead[high], color="tab:orange", alpha=0.25,
                          label=f"{low}-{high}")
        axis.plot(ahead["Date"], ahead[mid], color="tab:orange", marker=".", label=mid)
        if BASELINE in ahead:
            axis.plot(ahead["Date"], ahead[BASELINE], color="tab:gray", linestyle="--",
                      label="naive seasonal baseline")
        axis.set_title(f"Store {store}", fontsize=10)
        axis.tick_params(axis="x", labelrotation=45, labelsize=8)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return png_bytes(figure)


def gate_comparison_plot(scores: dict[str, Any]) -> bytes:
    """exp-RMSPE of challenger, champion and naive baseline on the same validation rows (what the gate compared)."""
    shown = [(label, scores[key], color) for key, label, color in GATE_FORECASTS if scores.get(key) is not None]
    figure, axis = plt.subplots(figsize=(8, 0.8 + 0.7 * max(1, len(shown))), constrained_layout=True)
    axis.barh([label for label, _, _ in shown], [value for _, value, _ in shown],
              color=[color for _, _, color in shown])
    for row, (_, value, _) in enumerate(shown):
        axis.annotate(f"{value:.4f}", (value, row), xytext=(4, 0), textcoords="offset points", va="center")
    axis.invert_yaxis()
    axis.set_xlabel(f"validation exp-RMSPE ({scores.get('validation_rows')} rows, lower is better)")
    axis.set_title("Quality gate: the same validation rows for every forecast", fontsize=10)
    axis.grid(alpha=0.3, axis="x")
    return png_bytes(figure)


def gate_section(training: dict[str, Any] | None, training_uri: str | None, gate_decision: str | None) -> str:
    """The quality gate's verdict (promoted or the fallback, and why), then what it compared."""
    verdict = f"<p><strong>Decision: {html.escape(gate_decision)}</strong></p>" if gate_decision else ""
    scores = (training or {}).get("gate_scores")
    if not scores:
        return verdict + f"<p>{html.escape(format_value(training_uri))} holds no gate scores.</p>"
    rows = [(f"{label} exp-RMSPE", scores.get(key)) for key, label, _ in GATE_FORECASTS]
    rows += [("validation rows", scores.get("validation_rows")),
             ("champion scored", scores.get("champion_model_uri") or "none as of the date"),
             ("model scored", training_uri)]
    return (verdict + embedded_png(gate_comparison_plot(scores), "exp-RMSPE of challenger, champion and baseline")
            + html_table(rows))


def forecast_page(title: str, run_metrics: list[tuple[str, Any]], fan: tuple[str, bytes, str] | None,
                  plots: list[tuple[str, bytes]], worst_stores: pd.DataFrame, model_info: list[tuple[str, Any]],
                  training: dict[str, Any] | None, training_uri: str | None, gate_decision: str | None,
                  accuracy: list[dict[str, Any]], training_curves: bytes | None = None) -> str:
    """The forecast report, what its reader wants first at the top: the horizon's fan chart (`fan`: heading, PNG and
    a trusted HTML note under it), the quality gate's verdict and comparison, the run's facts (`run_metrics`), then
    the other plots (horizon totals, validation window), the training curves of the run's model (`training`: its
    metrics.json; `training_curves`: the PNG its train job drew, else drawn here from the epochs), the accuracy of
    earlier forecasts scored by the as-of date (`accuracy`: score summary entries), the worst stores and the model's
    facts."""
    sections = [(fan[0], embedded_png(fan[1], fan[0]) + fan[2])] if fan else []
    sections += [("Model selection (quality gate)", gate_section(training, training_uri, gate_decision)),
                 ("Run metrics", html_table(run_metrics))]
    sections += [(heading, embedded_png(png, heading)) for heading, png in plots]
    history = (training or {}).get("epochs")
    if training_curves:
        sections.append(("Training curves", embedded_png(training_curves,
                                                         "loss and exp-RMSPE per epoch, train vs validation")))
    elif history:   # a metrics.json without the train job's PNG beside it
        sections.append(("Training curves", embedded_png(training_curves_png(history, training.get("best_epoch")),
                                                         "loss and exp-RMSPE per epoch, train vs validation")))
    if accuracy:
        sections.append(("Accuracy history: earlier forecasts scored with actuals up to the as-of date",
                         embedded_png(over_time_plot(accuracy), "exp-RMSPE by forecast as-of date")
                         + accuracy_table(accuracy)))
    else:
        sections.append(("Accuracy history", "<p>No earlier forecast has been scored with actuals up to the as-of "
                                             "date yet: scores arrive with the drops after a forecast's date.</p>"))
    worst = html_table([(f"Store {int(r.StoreId)}", r.rmspe) for r in worst_stores.itertuples()])
    sections += [("Stores with the largest validation error (exp-RMSPE)", worst), ("Model", html_table(model_info))]
    return page(title, sections)
