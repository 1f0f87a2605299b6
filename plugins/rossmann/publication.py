"""What publish_forecast writes: which forecast `forecast/latest.json` points at, and the registry record (pure)."""
from __future__ import annotations

from datetime import date
from typing import Any

from rossmann.uris import run_key


def decision_order(record: dict[str, Any]) -> tuple[date, str]:
    """What orders the records a pointer may hold: the as-of date, then, for one date, when the decision behind the
    record was made (a forecast's `decided_at`: its quality gate's decision; a champion record's `promoted_at`).
    UTC ISO timestamps compare as text; a record written before they existed has "" and is the oldest of its date."""
    return date.fromisoformat(record["as_of"]), str(record.get("decided_at") or record.get("promoted_at") or "")


def replaces_latest(record: dict[str, Any], current: dict[str, Any] | None) -> bool:
    """True when `record` should replace the pointer's `current` record: there is none, current is for an earlier
    date, or for the same date and its decision is not newer than record's. A backfill of an earlier date then never
    hides the newest forecast, a re-run of the latest date replaces its own forecast, and of two runs for one date
    the one decided earlier never replaces the later one's (a gate that lost a same-date race and publishes last)."""
    return current is None or decision_order(record) >= decision_order(current)


def forecast_registry_record(forecast: dict[str, Any], predict_summary: dict[str, Any]) -> dict[str, Any]:
    """The forecast registry record (`forecast/history/<as_of>/<run key>.json`) that the scoring branch reads:
    which run forecast from which date, where its published copy is (`forecast/published/...`, with the SHA-256 of
    every file), the attempt it was copied from, and the horizon the predictions cover."""
    horizon = predict_summary.get("horizon") or {}
    if not horizon.get("start") or not horizon.get("end"):
        raise ValueError(f"the predict summary has no horizon start/end ({horizon!r}): re-run predict, whose "
                         "summary carries the features' test_window since the scoring branch exists")
    return {"as_of": forecast["as_of"], "run_id": forecast["run_id"], "run_key": run_key(forecast["run_id"]),
            "predictions_uri": forecast["predictions_uri"], "submission_uri": forecast["submission_uri"],
            "report_uri": forecast["report_uri"], "horizon_start": horizon["start"], "horizon_end": horizon["end"],
            "forecast_model": forecast.get("forecast_model"), "fallback_reason": forecast.get("fallback_reason"),
            "published_uri": forecast.get("published_uri"), "source_attempt_uri": forecast.get("source_attempt_uri"),
            "forecast_sha256": forecast.get("forecast_sha256"), "decided_at": forecast.get("decided_at")}
