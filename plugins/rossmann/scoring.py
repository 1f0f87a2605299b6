"""The scoring branch's task bodies: which published forecasts a drop can score, and the compact scores summary.

A forecast as of D0 is scored with the drop for D when D0 < D and its horizon starts on or before D. Once a drop
on or after its horizon's end has scored it (summary.json says so), later drops add no actual to it and it is left
out, so the daily work stays bounded; a run for that same date still re-scores it (an idempotent re-run).
"""
from __future__ import annotations

import logging
from typing import Any, Iterable

from rossmann.outputs import exists, list_uris, read_json, write_json
from rossmann.uris import forecast_record_key

log = logging.getLogger("rossmann.scoring")
MODEL, BASELINE = "model_exp_rmspe", "baseline_exp_rmspe"


def finished_before(entry: dict[str, Any] | None, scoring_date: str) -> bool:
    """Whether a forecast's summary entry shows it was scored through its horizon's end by an earlier drop."""
    if not entry or not entry.get("horizon"):
        return False
    return entry["horizon"]["end"] <= entry["scoring_date"] < scoring_date


def candidate_uris(record_uris: Iterable[str], scoring_date: str, summary: dict[str, Any] | None) -> list[str]:
    """Registry records worth reading: named as a forecast as of a date before D and not finished before D."""
    entries = (summary or {}).get("forecasts", {})
    out = []
    for uri in record_uris:
        key = forecast_record_key(uri)
        if key and key[0] < scoring_date and not finished_before(entries.get("/".join(key)), scoring_date):
            out.append(uri)
    return sorted(out)


def select_forecasts(records: Iterable[dict[str, Any]], scoring_date: str) -> list[dict[str, Any]]:
    """The records a drop for scoring_date can score (as_of < D, horizon start <= D), in (as_of, run_id) order."""
    chosen = [r for r in records if r["as_of"] < scoring_date and r["horizon_start"] <= scoring_date]
    return sorted(chosen, key=lambda r: (r["as_of"], r["run_id"]))


def find_forecasts_to_score(hook, plan: dict[str, str]) -> str | None:
    """Write the list of forecasts to score with the run's drop to plan["scoring_forecasts"]; its URI, or None
    when the list is empty (the DAG then skips the scoring tasks). The list is written either way, for the record."""
    day = plan["as_of"]
    summary = read_json(hook, plan["scores_summary"]) if exists(hook, plan["scores_summary"]) else None
    uris = candidate_uris(list_uris(hook, plan["forecast_history"]), day, summary)
    forecasts = select_forecasts([read_json(hook, uri) for uri in uris], day)
    write_json(hook, plan["scoring_forecasts"], forecasts)
    log.info("%d forecast(s) to score with the drop for %s: %s", len(forecasts), day,
             [f"{f['as_of']}/{f['run_key']}" for f in forecasts])
    return plan["scoring_forecasts"] if forecasts else None


def compact_summary(summary: dict[str, Any], plan: dict[str, str]) -> dict[str, Any]:
    """The few numbers of summary.json for XCom and the asset event: pooled model vs baseline, the newest scored
    forecast, the pending count, and where the summary and the report are."""
    scored = [e for e in summary["forecasts"].values() if e["status"] == "scored"]
    newest = max(scored, key=lambda e: (e["as_of"], e["scoring_date"], e["run_id"]), default=None)
    overall = summary["overall"]
    model, baseline = overall[MODEL], overall[BASELINE]
    return {
        "scoring_date": plan["as_of"], "scored_through": summary["scored_through"],
        "forecasts_scored": overall["forecasts_scored"], "pending": len(summary["pending"]), "rows": overall["rows"],
        MODEL: model, BASELINE: baseline,
        "beats_baseline": None if model is None or baseline is None else model < baseline,
        "newest": None if newest is None else {key: newest[key] for key in (
            "as_of", "run_id", "scoring_date", "days_scored", "rows", MODEL, BASELINE)},
        "summary_uri": plan["scores_summary"], "report_uri": plan["scores_report"],
    }


def publish_scores(hook, plan: dict[str, str]) -> dict[str, Any]:
    """summary.json as the score job left it, reduced to compact_summary."""
    return compact_summary(read_json(hook, plan["scores_summary"]), plan)
