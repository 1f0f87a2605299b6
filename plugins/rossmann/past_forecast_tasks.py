"""The scoring branch's task bodies: which forecasts a drop can score, the compact scores summary, the drift alert.

A forecast as of D0 is scored with the drop for D when D0 < D and its horizon starts on or before D. Once a drop
on or after its horizon's end has scored it (summary.json says so), later drops add no actual to it and it is left
out, so the daily work stays bounded; a run for that same date still re-scores it (an idempotent re-run). publish_scores
checks summary.json's "recent" block (the last 14 days up to the latest scoring date): a median forecast/actual
ratio off 1 by more than the threshold, or a model that loses to the naive baseline there, posts one drift alert.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable

from rossmann.alerts import forecast_drift_alert
from rossmann.outputs import exists, list_uris, read_json, write_json
from rossmann.uris import forecast_record_key
from rossmann_jobs.past_forecasts.records import (
    BASELINE_MEDIAN_RATIO,
    BASELINE_RMSPE,
    DIGITS,
    MODEL_MEDIAN_RATIO,
    MODEL_RMSPE,
    RECENT,
    SCORED,
)

log = logging.getLogger("rossmann.scoring")


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
    scored = [e for e in summary["forecasts"].values() if e["status"] == SCORED]
    newest = max(scored, key=lambda e: (e["as_of"], e["scoring_date"], e["run_id"]), default=None)
    overall = summary["overall"]
    model, baseline = overall[MODEL_RMSPE], overall[BASELINE_RMSPE]
    return {
        "scoring_date": plan["as_of"], "scored_through": summary["scored_through"],
        "forecasts_scored": overall["forecasts_scored"], "pending": len(summary["pending"]), "rows": overall["rows"],
        MODEL_RMSPE: model, BASELINE_RMSPE: baseline,
        "beats_baseline": None if model is None or baseline is None else model < baseline,
        "newest": None if newest is None else {key: newest[key] for key in (
            "as_of", "run_id", "scoring_date", "days_scored", "rows", MODEL_RMSPE, BASELINE_RMSPE)},
        RECENT: summary.get(RECENT),
        "summary_uri": plan["scores_summary"], "report_uri": plan["scores_report"],
    }


def drift_checks(recent: dict[str, Any] | None, threshold: float,
                 scoring_date: str | None = None) -> dict[str, list[str]]:
    """summary.json's recent block checked, one sentence each: "findings" (failed checks, with their numbers) and
    "not_checked" (checks its numbers cannot decide, and why). With scoring_date, only that drop's block is checked."""
    if recent is None:
        return {"findings": [], "not_checked": ["summary.json has no recent check (scored before it existed)"]}
    if scoring_date is not None and recent["scoring_date"] != scoring_date:
        # The summary keeps the latest date's check: a backfill of an earlier date would repeat that run's alert.
        return {"findings": [], "not_checked": [f"the recent check is the drop for {recent['scoring_date']}'s, "
                                                f"not this run's ({scoring_date}): that run checks it"]}
    window = f"the last {recent['window_days']} days up to {recent['scoring_date']} ({recent['rows']} rows)"
    if not recent["rows"]:
        return {"findings": [], "not_checked": [f"no actual to score in {window}"]}
    findings, not_checked = [], []
    ratio = recent[MODEL_MEDIAN_RATIO]
    if ratio is None:
        not_checked.append(f"bias: no model median ratio over {window}")
    elif round(abs(ratio - 1), DIGITS) > threshold:   # rounded: 1.05 - 1 is 0.050000000000000044 in floats
        findings.append(f"bias: the model's median forecast/actual ratio over {window} is {ratio:.4f}, off 1 by "
                        f"more than {threshold:g} ({'too high' if ratio > 1 else 'too low'})")
    model, baseline = recent[MODEL_RMSPE], recent[BASELINE_RMSPE]
    if model is None or baseline is None:
        not_checked.append(f"baseline: model exp-RMSPE {model}, baseline exp-RMSPE {baseline} over {window}")
    elif model > baseline:
        findings.append(f"baseline: the model's exp-RMSPE over {window} is {model:.4f}, worse than the naive "
                        f"baseline's {baseline:.4f} on the same rows")
    return {"findings": findings, "not_checked": not_checked}


def drift_findings(recent: dict[str, Any] | None, threshold: float, scoring_date: str | None = None) -> list[str]:
    """The failed checks of drift_checks: [] when every check passed or none could be made."""
    return drift_checks(recent, threshold, scoring_date)["findings"]


def drift_alert_details(recent: dict[str, Any], findings: list[str], threshold: float,
                        plan: dict[str, str], run_id: str | None) -> dict[str, Any]:
    """The drift alert's content: the run, the failed checks and the numbers checked (no data row, no secret)."""
    return {"run_id": run_id, "as_of": plan["as_of"], "findings": findings, "bias_alert_threshold": threshold,
            **{key: recent[key] for key in ("window_days", "dates", "forecasts", "rows", "days", MODEL_RMSPE,
                                            BASELINE_RMSPE, MODEL_MEDIAN_RATIO, BASELINE_MEDIAN_RATIO)},
            "summary_uri": plan["scores_summary"], "report_uri": plan["scores_report"]}


def publish_scores(hook, plan: dict[str, str], bias_alert_threshold: float, context: dict[str, Any]) -> dict[str, Any]:
    """summary.json as the score job left it, reduced to compact_summary, with the drift check's outcome under
    "alert"; posts the drift alert when a check fails (the task still succeeds: the scores are published)."""
    summary = read_json(hook, plan["scores_summary"])
    recent = summary.get(RECENT)
    checks = drift_checks(recent, bias_alert_threshold, plan["as_of"])
    for reason in checks["not_checked"]:
        log.info("drift check not made: %s", reason)
    alert = {"bias_alert_threshold": bias_alert_threshold, **checks, "alerted": bool(checks["findings"])}
    if checks["findings"]:
        log.warning("forecast drift: %s", "; ".join(checks["findings"]))
        details = drift_alert_details(recent, checks["findings"], bias_alert_threshold, plan, context.get("run_id"))
        try:
            forecast_drift_alert(details).notify(context)
        except Exception as error:   # an alert endpoint outage must not hold back the scores asset
            log.exception("the drift alert could not be posted")
            alert["post_error"] = type(error.__cause__ or error).__name__   # the channel's own failure, not our wrapper
    return {**compact_summary(summary, plan), "alert": alert}
