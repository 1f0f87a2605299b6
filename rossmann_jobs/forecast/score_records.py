"""The scoring job's JSON documents: one record per (forecast, scoring date) and the summary of the latest ones.

Pure Python on small collected rows. Nothing holds a timestamp and floats are rounded, so re-scoring the same
forecasts with the same drop writes byte-identical files (an idempotent re-run).
"""
from __future__ import annotations

import math
import re
from datetime import date
from typing import Any, Iterable

from rossmann_jobs.forecast.scoring import BASELINE_RMSPE, MODEL_RMSPE

SCORED, PENDING = "scored", "pending"
DIGITS = 8          # far below any meaningful difference, far above float summation-order noise

RUN_KEY = re.compile(r"^[A-Za-z0-9._-]+$")
REQUIRED = ("as_of", "run_id", "run_key", "predictions_uri")


class ScoringInputError(ValueError):
    """The forecast list or a forecast it names cannot be scored; the message says which and what to do."""


def check_forecast_list(forecasts: Any, source: str, scoring_date: date) -> list[dict[str, Any]]:
    """The forecast records of the --forecasts list, checked: the fields the job uses, as-of dates before D."""
    if not isinstance(forecasts, list):
        raise ScoringInputError(f"{source}: expected a JSON list of forecast records, got {type(forecasts).__name__}")
    for index, record in enumerate(forecasts):
        missing = [key for key in REQUIRED if not isinstance(record, dict) or not record.get(key)]
        if missing:
            raise ScoringInputError(f"{source}: record {index} lacks {missing} (needs {list(REQUIRED)})")
        try:
            as_of = date.fromisoformat(record["as_of"])
        except (TypeError, ValueError):
            raise ScoringInputError(f"{source}: record {index} as_of {record['as_of']!r} is not YYYY-MM-DD") from None
        if as_of >= scoring_date:
            raise ScoringInputError(f"{source}: record {index} is a forecast as of {as_of}, not before the scoring "
                                    f"date {scoring_date}: nothing of its horizon can be known yet")
        if not RUN_KEY.match(record["run_key"]):
            raise ScoringInputError(f"{source}: record {index} run_key {record['run_key']!r} is not a storage key")
    keys = [forecast_key(record) for record in forecasts]
    if len(set(keys)) != len(keys):
        twice = sorted({key for key in keys if keys.count(key) > 1})
        raise ScoringInputError(f"{source}: forecast(s) {twice} listed twice")
    return forecasts


def forecast_key(record: dict[str, Any]) -> str:
    """`<as_of>/<run key>`: where a forecast's records live under the scores root."""
    return f"{record['as_of']}/{record['run_key']}"


def record_path(record: dict[str, Any], scoring_date: date) -> str:
    """The record of one forecast scored with one drop, relative to the scores root."""
    return f"{forecast_key(record)}/{scoring_date.isoformat()}.json"


def _number(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, DIGITS) if math.isfinite(value) else None
    return value


def _scores(row: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    out = {} if name is None else {name: _number(row[name])}
    return {**out, **{key: _number(row[key]) for key in ("rows", "days", "rows_without_forecast", MODEL_RMSPE,
                                                        BASELINE_RMSPE)}}


def forecast_record(forecast: dict[str, Any], scoring_date: date, raw_uri: str, horizon: dict[str, str] | None,
                    overall: dict[str, Any] | None, by_lead: Iterable[dict[str, Any]],
                    by_store: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The record of one forecast scored with the drop for scoring_date; pending when no actual is known yet."""
    status = SCORED if overall and overall["rows"] else PENDING
    return {
        "forecast": {key: forecast.get(key) for key in ("as_of", "run_id", "run_key", "predictions_uri")},
        "scoring_date": scoring_date.isoformat(),
        "raw": raw_uri,
        "horizon": horizon,
        "status": status,
        "overall": _scores(overall) if status == SCORED else None,
        "by_lead_day": [_scores(row, "lead_day") for row in by_lead],
        "by_store": [_scores(row, "store") for row in by_store],
    }


def summary_entry(record: dict[str, Any], record_uri: str) -> dict[str, Any]:
    """What summary.json keeps of a forecast's latest record: overall scores and the per-lead-day ones, compact."""
    overall = record["overall"] or {}
    return {
        "as_of": record["forecast"]["as_of"], "run_id": record["forecast"]["run_id"],
        "scoring_date": record["scoring_date"], "status": record["status"], "horizon": record["horizon"],
        "rows": overall.get("rows", 0), "days_scored": overall.get("days", 0),
        MODEL_RMSPE: overall.get(MODEL_RMSPE), BASELINE_RMSPE: overall.get(BASELINE_RMSPE),
        "by_lead_day": [[row["lead_day"], row["rows"], row[MODEL_RMSPE], row[BASELINE_RMSPE]]
                        for row in record["by_lead_day"]],
        "record_uri": record_uri,
    }


def pooled(parts: Iterable[tuple[int, float | None]]) -> float | None:
    """exp-RMSPE over the union of disjoint row sets from (rows, exp-RMSPE) pairs: sqrt(sum(n r^2) / sum(n)).
    None when a part with rows has no score (e.g. a forecast without a baseline): it would not compare."""
    parts = [(rows, score) for rows, score in parts if rows]
    if not parts or any(score is None for _rows, score in parts):
        return None
    return _number(math.sqrt(sum(rows * score ** 2 for rows, score in parts) / sum(rows for rows, _ in parts)))


def merge_summary(previous: dict[str, Any] | None, entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """previous summary.json + this run's entries; per forecast the entry of the latest scoring date wins (this
    run's on a tie), so runs for different dates may finish in any order."""
    forecasts = dict((previous or {}).get("forecasts", {}))
    for key, entry in entries.items():
        current = forecasts.get(key)
        if current is None or entry["scoring_date"] >= current["scoring_date"]:
            forecasts[key] = entry
    forecasts = dict(sorted(forecasts.items()))
    scored = [e for e in forecasts.values() if e["status"] == SCORED]
    return {
        "forecasts": forecasts,
        "pending": [key for key, entry in forecasts.items() if entry["status"] == PENDING],
        "scored_through": max((e["scoring_date"] for e in forecasts.values()), default=None),
        "overall": {"forecasts_scored": len(scored), "rows": sum(e["rows"] for e in scored),
                    MODEL_RMSPE: pooled((e["rows"], e[MODEL_RMSPE]) for e in scored),
                    BASELINE_RMSPE: pooled((e["rows"], e[BASELINE_RMSPE]) for e in scored)},
    }


def by_lead_day(summary: dict[str, Any]) -> list[tuple[int, int, float | None, float | None]]:
    """(lead day, rows, model, baseline exp-RMSPE) pooled over the latest records of every scored forecast."""
    parts: dict[int, list[tuple[int, float | None, float | None]]] = {}
    for entry in summary["forecasts"].values():
        for lead, rows, model, baseline in entry["by_lead_day"]:
            parts.setdefault(lead, []).append((rows, model, baseline))
    return [(lead, sum(p[0] for p in rows), pooled((p[0], p[1]) for p in rows), pooled((p[0], p[2]) for p in rows))
            for lead, rows in sorted(parts.items())]


def scored_as_of(summary: dict[str, Any] | None, as_of: date) -> list[dict[str, Any]]:
    """The summary's scored entries whose scores were known on as_of (scoring drop dated <= as_of), oldest
    forecast first: a report as of D never shows accuracy measured with actuals after D (a backfill's report)."""
    entries = (summary or {}).get("forecasts", {}).values()
    return sorted((e for e in entries if e["status"] == SCORED and date.fromisoformat(e["scoring_date"]) <= as_of),
                  key=lambda e: (e["as_of"], e["run_id"]))
