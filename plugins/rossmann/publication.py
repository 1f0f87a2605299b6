"""What publish_forecast writes: which forecast `forecast/latest.json` points at, and the registry record (pure)."""
from __future__ import annotations

from datetime import date
from typing import Any

from rossmann.uris import run_key


def replaces_latest(as_of: str, current: dict[str, Any] | None) -> bool:
    """True when a forecast for as_of (YYYY-MM-DD) should replace the current pointer's: there is none, or it is
    for the same or an earlier date. A backfill of an earlier date then never hides the newest forecast, and a
    re-run of the latest date replaces its own forecast."""
    return current is None or date.fromisoformat(as_of) >= date.fromisoformat(current["as_of"])


def forecast_registry_record(forecast: dict[str, Any], predict_summary: dict[str, Any]) -> dict[str, Any]:
    """The forecast registry record (`forecast/history/<as_of>/<run key>.json`) that the scoring branch reads:
    which run forecast from which date, where its predictions are, and the horizon they cover."""
    horizon = predict_summary.get("horizon") or {}
    if not horizon.get("start") or not horizon.get("end"):
        raise ValueError(f"the predict summary has no horizon start/end ({horizon!r}): re-run predict, whose "
                         "summary carries the features' test_window since the scoring branch exists")
    return {"as_of": forecast["as_of"], "run_id": forecast["run_id"], "run_key": run_key(forecast["run_id"]),
            "predictions_uri": forecast["predictions_uri"], "submission_uri": forecast["submission_uri"],
            "report_uri": forecast["report_uri"], "horizon_start": horizon["start"], "horizon_end": horizon["end"],
            "forecast_model": forecast.get("forecast_model"), "fallback_reason": forecast.get("fallback_reason")}
