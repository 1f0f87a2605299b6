"""The scoring job's JSON documents: one record per (forecast, scoring date) and the summary of the latest ones.

Pure Python on small collected rows, standard library only: the Airflow side reads summary.json with the key names
defined here. Nothing holds a timestamp and floats are rounded, so re-scoring the same forecasts with the same drop
writes byte-identical files (an idempotent re-run).
"""
from __future__ import annotations

import math
import re
import statistics
from datetime import date
from typing import Any, Iterable

SCORED, PENDING = "scored", "pending"
MODEL_RMSPE, BASELINE_RMSPE = "model_exp_rmspe", "baseline_exp_rmspe"
# Median of forecast / actual over the scored rows: 1 is unbiased, 1.08 says 8 % too high on the typical row.
MODEL_MEDIAN_RATIO, BASELINE_MEDIAN_RATIO = "model_median_ratio", "baseline_median_ratio"
# The quantile forecasts (forecast/quantiles.py): the share of actuals inside the interval between the lowest and the
# highest quantile (P10-P90: nominal 0.8), and the weighted quantile loss (Amazon Forecast's wQL: per level
# 2 sum(pinball loss) / sum(actual), averaged over the levels; lower is better).
MODEL_COVERAGE, BASELINE_COVERAGE = "model_interval_coverage", "baseline_interval_coverage"
MODEL_QUANTILE_LOSS, BASELINE_QUANTILE_LOSS = "model_quantile_loss", "baseline_quantile_loss"
SCORE_KEYS = (MODEL_RMSPE, BASELINE_RMSPE, MODEL_MEDIAN_RATIO, BASELINE_MEDIAN_RATIO, MODEL_COVERAGE,
              BASELINE_COVERAGE, MODEL_QUANTILE_LOSS, BASELINE_QUANTILE_LOSS)
# An interval is calibrated while its coverage is within this of its nominal coverage (or two binomial standard
# errors, for few rows): 77-83 % for the 80 % interval.
COVERAGE_TOLERANCE = 0.03
UNDER_COVERING, OVER_COVERING, CALIBRATED = "under-covering", "over-covering", "calibrated"
# summary.json's check of the latest drop: every row of this run's forecasts dated in the last RECENT_WINDOW_DAYS
# days up to the scoring date, whatever the lead day (publish_scores alerts on it).
RECENT, RECENT_WINDOW_DAYS = "recent", 14
# How far the recent median ratio may be off 1 before publish_scores alerts: the DAG param bias_alert_threshold's
# default, and the band the scores report draws around 1.
BIAS_ALERT_THRESHOLD = 0.05
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
    return {**out, **{key: _number(row[key]) for key in ("rows", "days", "rows_without_forecast", *SCORE_KEYS)}}


def interval_verdict(coverage: float | None, nominal: float, rows: int) -> str | None:
    """Whether an interval's observed coverage over `rows` rows is below, above or near its nominal coverage."""
    if coverage is None or not rows:
        return None
    tolerance = max(COVERAGE_TOLERANCE, 2 * math.sqrt(nominal * (1 - nominal) / rows))
    if coverage < nominal - tolerance:
        return UNDER_COVERING
    return OVER_COVERING if coverage > nominal + tolerance else CALIBRATED


def forecast_record(forecast: dict[str, Any], scoring_date: date, raw_uri: str, horizon: dict[str, str] | None,
                    overall: dict[str, Any] | None, by_lead: Iterable[dict[str, Any]],
                    by_store: Iterable[dict[str, Any]], by_lead_week: Iterable[dict[str, Any]],
                    quantile_levels: Iterable[float] = ()) -> dict[str, Any]:
    """The record of one forecast scored with the drop for scoring_date; pending when no actual is known yet.
    quantile_levels: the levels scored (the interval is the lowest to the highest)."""
    status = SCORED if overall and overall["rows"] else PENDING
    levels = sorted(quantile_levels)
    nominal = _number(levels[-1] - levels[0]) if len(levels) > 1 else None
    scores = _scores(overall) if status == SCORED else None
    return {
        "forecast": {key: forecast.get(key) for key in ("as_of", "run_id", "run_key", "predictions_uri")},
        "scoring_date": scoring_date.isoformat(),
        "raw": raw_uri,
        "horizon": horizon,
        "status": status,
        "quantile_levels": levels, "interval_nominal": nominal,
        "interval_verdict": interval_verdict((scores or {}).get(MODEL_COVERAGE), nominal, (scores or {}).get("rows"))
        if nominal else None,
        "overall": scores,
        "by_lead_day": [_scores(row, "lead_day") for row in by_lead],
        "by_lead_week": [_scores(row, "lead_week") for row in by_lead_week],
        "by_store": [_scores(row, "store") for row in by_store],
    }


def summary_entry(record: dict[str, Any], record_uri: str) -> dict[str, Any]:
    """What summary.json keeps of a forecast's latest record: overall scores, the per-lead-day and per-lead-week
    ones as compact lists ([lead day, rows, model, baseline exp-RMSPE], [lead week, rows, *SCORE_KEYS])."""
    overall = record["overall"] or {}
    return {
        "as_of": record["forecast"]["as_of"], "run_id": record["forecast"]["run_id"],
        "scoring_date": record["scoring_date"], "status": record["status"], "horizon": record["horizon"],
        "rows": overall.get("rows", 0), "days_scored": overall.get("days", 0),
        **{key: overall.get(key) for key in SCORE_KEYS},
        "interval_nominal": record.get("interval_nominal"), "interval_verdict": record.get("interval_verdict"),
        "by_lead_day": [[row["lead_day"], row["rows"], row[MODEL_RMSPE], row[BASELINE_RMSPE]]
                        for row in record["by_lead_day"]],
        "by_lead_week": [[row["lead_week"], row["rows"], *(row[key] for key in SCORE_KEYS)]
                         for row in record["by_lead_week"]],
        "record_uri": record_uri,
    }


def pooled(parts: Iterable[tuple[int, float | None]]) -> float | None:
    """exp-RMSPE over the union of disjoint row sets from (rows, exp-RMSPE) pairs: sqrt(sum(n r^2) / sum(n)).
    None when a part with rows has no score (e.g. a forecast without a baseline): it would not compare."""
    parts = [(rows, score) for rows, score in parts if rows]
    if not parts or any(score is None for _rows, score in parts):
        return None
    return _number(math.sqrt(sum(rows * score ** 2 for rows, score in parts) / sum(rows for rows, _ in parts)))


def pooled_mean(parts: Iterable[tuple[int, float | None]]) -> float | None:
    """A mean over the union of disjoint row sets from (rows, mean) pairs (a coverage); None as in pooled."""
    parts = [(rows, value) for rows, value in parts if rows]
    if not parts or any(value is None for _rows, value in parts):
        return None
    return _number(sum(rows * value for rows, value in parts) / sum(rows for rows, _ in parts))


def recent_check(row: dict[str, Any], scoring_date: date, window_days: int = RECENT_WINDOW_DAYS) -> dict[str, Any]:
    """summary.json's RECENT block from the job's collected aggregate over the window (rows, days, forecasts,
    SCORE_KEYS; null scores when no row was scored): dated in (scoring_date - window_days, scoring_date]."""
    first_day = date.fromordinal(scoring_date.toordinal() - window_days + 1)
    return {"scoring_date": scoring_date.isoformat(), "window_days": window_days,
            "dates": {"start": first_day.isoformat(), "end": scoring_date.isoformat()},
            **{key: row[key] for key in ("forecasts", "rows", "days")},
            **{key: _number(row[key]) for key in SCORE_KEYS}}


def _latest(current: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any] | None:
    """The one of two dated documents with the later scoring date; the new one on a tie (an idempotent re-run)."""
    if current is None or (new is not None and new["scoring_date"] >= current["scoring_date"]):
        return new
    return current


def merge_summary(previous: dict[str, Any] | None, entries: dict[str, dict[str, Any]],
                  recent: dict[str, Any] | None = None) -> dict[str, Any]:
    """previous summary.json + this run's entries and recent check; per forecast the entry of the latest scoring
    date wins (this run's on a tie), and so does the recent check, so runs for different dates may finish in any
    order."""
    forecasts = dict((previous or {}).get("forecasts", {}))
    for key, entry in entries.items():
        forecasts[key] = _latest(forecasts.get(key), entry)
    forecasts = dict(sorted(forecasts.items()))
    scored = [e for e in forecasts.values() if e["status"] == SCORED]
    return {
        "forecasts": forecasts,
        "pending": [key for key, entry in forecasts.items() if entry["status"] == PENDING],
        "scored_through": max((e["scoring_date"] for e in forecasts.values()), default=None),
        "overall": {"forecasts_scored": len(scored), "rows": sum(e["rows"] for e in scored),
                    MODEL_RMSPE: pooled((e["rows"], e[MODEL_RMSPE]) for e in scored),
                    BASELINE_RMSPE: pooled((e["rows"], e[BASELINE_RMSPE]) for e in scored),
                    MODEL_COVERAGE: pooled_mean((e["rows"], e.get(MODEL_COVERAGE)) for e in scored),
                    BASELINE_COVERAGE: pooled_mean((e["rows"], e.get(BASELINE_COVERAGE)) for e in scored)},
        RECENT: _latest((previous or {}).get(RECENT), recent),
    }


def by_lead_day(summary: dict[str, Any]) -> list[tuple[int, int, float | None, float | None]]:
    """(lead day, rows, model, baseline exp-RMSPE) pooled over the latest records of every scored forecast."""
    parts: dict[int, list[tuple[int, float | None, float | None]]] = {}
    for entry in summary["forecasts"].values():
        for lead, rows, model, baseline in entry["by_lead_day"]:
            parts.setdefault(lead, []).append((rows, model, baseline))
    return [(lead, sum(p[0] for p in rows), pooled((p[0], p[1]) for p in rows), pooled((p[0], p[2]) for p in rows))
            for lead, rows in sorted(parts.items())]


def median_ratio_by_lead_week(summary: dict[str, Any]) -> list[tuple[int, int, float | None, float | None]]:
    """(lead week, forecasts, model, baseline median ratio) over the latest records of every scored forecast: per
    lead week the median of the forecasts' own median ratios (rows are not kept in the summary, so the median of
    all their rows cannot be had); a forecast without a baseline ratio counts for the model only."""
    parts: dict[int, list[tuple[float | None, float | None]]] = {}
    for entry in summary["forecasts"].values():
        for row in entry.get("by_lead_week", []):
            parts.setdefault(row[0], []).append((row[4], row[5]))

    def median(values: Iterable[float | None]) -> float | None:
        known = [value for value in values if value is not None]
        return _number(statistics.median(known)) if known else None

    return [(week, len(ratios), median(r[0] for r in ratios), median(r[1] for r in ratios))
            for week, ratios in sorted(parts.items())]


def coverage_by_lead_week(summary: dict[str, Any]) -> list[tuple[int, int, float | None, float | None,
                                                              float | None, float | None]]:
    """(lead week, rows, model and baseline interval coverage, model and baseline quantile loss) over the latest
    records of every scored forecast that has quantile scores: coverage pooled exactly (a mean over rows); the
    quantile loss as the rows-weighted mean of the forecasts' own (their sums of sales are not kept)."""
    parts: dict[int, list[list[Any]]] = {}
    for entry in summary["forecasts"].values():
        for row in entry.get("by_lead_week", []):
            if len(row) >= 10 and row[6] is not None:    # records written before the quantiles have none
                parts.setdefault(row[0], []).append(row)
    return [(week, sum(r[1] for r in rows), *(pooled_mean((r[1], r[index]) for r in rows) for index in (6, 7, 8, 9)))
            for week, rows in sorted(parts.items())]


def interval_nominal(summary: dict[str, Any]) -> float | None:
    """The nominal coverage of the scored forecasts' interval (the latest one's, should they differ)."""
    known = [e for e in summary["forecasts"].values() if e.get("interval_nominal")]
    return max(known, key=lambda e: (e["scoring_date"], e["as_of"]))["interval_nominal"] if known else None


def scored_as_of(summary: dict[str, Any] | None, as_of: date) -> list[dict[str, Any]]:
    """The summary's scored entries whose scores were known on as_of (scoring drop dated <= as_of), oldest
    forecast first: a report as of D never shows accuracy measured with actuals after D (a backfill's report)."""
    entries = (summary or {}).get("forecasts", {}).values()
    return sorted((e for e in entries if e["status"] == SCORED and date.fromisoformat(e["scoring_date"]) <= as_of),
                  key=lambda e: (e["as_of"], e["run_id"]))
