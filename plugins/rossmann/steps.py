"""The DAG's Python task bodies: S3 reads and writes around the pure gate and output rules (the DAG only wires)."""
from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from rossmann.gate import decide_promotion
from rossmann.outputs import (committed_attempt_uri, copy_files, exists, read_json, read_manifest, read_pointer,
                              train_summary, write_json)
from rossmann.publication import replaces_latest
from rossmann.uris import pinned_model_uri

log = logging.getLogger("rossmann.quality_gate")


def scored_model(hook, plan: dict[str, str]) -> dict[str, Any]:
    """The committed model's metrics.json, reduced to the numbers the gate and the UI need."""
    attempt = committed_attempt_uri(hook, plan["model"])
    metrics_uri = f"{attempt}/metrics.json"
    summary = train_summary(read_json(hook, metrics_uri), metrics_uri)
    return {**summary, "model_uri": plan["model"], "model_attempt_uri": attempt, "metrics_uri": metrics_uri}


def apply_quality_gate(hook, plan: dict[str, str], metrics: dict[str, Any], tolerance: float,
                       run_id: str) -> dict[str, Any]:
    """Promote the scored model if it is not worse than the champion; returns the decision and the champion after.

    A promoted model is pinned: its committed attempt is copied under `models/champions/` and champion.json names
    the copy, so re-running the champion's run (which re-commits its model output) never changes the champion's
    weights under the same pointer. Writing champion.json (one PUT) is the commit; a crash before it leaves only
    an unreferenced copy.
    """
    manifest = read_manifest(hook, plan["model"])
    candidate = f"{plan['model']}/{manifest['attempt']}"
    if candidate != metrics["model_attempt_uri"]:
        raise RuntimeError(f"{plan['model']} now commits {candidate}, but read_train_metrics scored "
                           f"{metrics['model_attempt_uri']}: clear read_train_metrics and the tasks after it.")
    champion = read_pointer(hook, plan["champion"])
    decision = decide_promotion(metrics["best_val_exp_rmspe"], champion, tolerance, run_id=run_id,
                                model_attempt_uri=candidate)
    if decision["promoted"]:
        pinned = pinned_model_uri(plan["champion_models"], candidate)
        copy_files(hook, candidate, pinned, manifest["files"])
        champion = {"model_uri": pinned, "source_model_uri": candidate,
                    "val_exp_rmspe": metrics["best_val_exp_rmspe"], "features_uri": plan["features"],
                    "run_id": run_id, "as_of": plan["as_of"], "promoted_at": datetime.now(timezone.utc).isoformat()}
        write_json(hook, plan["champion"], champion)
    elif champion is None:
        raise ValueError(f"No champion model exists and this run's model was not promoted "
                         f"({decision['reason']}): there is no model to forecast with.")
    log.info("quality gate: %s -> %s; champion is %s", decision["reason"],
             "PROMOTED" if decision["promoted"] else "KEPT", champion["model_uri"])
    return {**decision, "candidate_model_uri": candidate, "champion_model_uri": champion["model_uri"],
            "champion_run_id": champion["run_id"]}


def publish_forecast(hook, plan: dict[str, str], gate: dict[str, Any], run_id: str) -> tuple[dict[str, Any], bool]:
    """Check the committed forecast and point `forecast/latest.json` at it unless that holds a newer as-of date's
    forecast; returns the forecast record (the pointer's content) and whether the pointer now holds it."""
    attempt = committed_attempt_uri(hook, plan["predictions"])
    summary = read_json(hook, f"{plan['predictions']}/_SUCCESS").get("summary", {})
    forecast = {
        "as_of": plan["as_of"],
        "run_id": run_id,
        "model_uri": gate["champion_model_uri"],
        "submission_uri": f"{attempt}/submission.csv",
        "report_uri": f"{attempt}/report/index.html",
        "predictions_uri": f"{attempt}/predictions",
        "forecast_val_exp_rmspe": summary.get("validation_exp_rmspe"),
        "forecast_rows": summary.get("rows"),
        "published_at": datetime.now(timezone.utc).isoformat(),
    }
    missing = [uri for uri in (forecast["submission_uri"], forecast["report_uri"]) if not exists(hook, uri)]
    if missing:
        raise FileNotFoundError(f"The committed predict output lacks {missing}: the predict job's output "
                                "contract is in docs/ARCHITECTURE.md")
    current = read_pointer(hook, plan["forecast_pointer"])
    if not replaces_latest(plan["as_of"], current):
        log.warning("forecast for as-of %s committed at %s; %s keeps the newer as-of %s forecast (run %s)",
                    plan["as_of"], forecast["submission_uri"], plan["forecast_pointer"], current["as_of"],
                    current["run_id"])
        return forecast, False
    write_json(hook, plan["forecast_pointer"], forecast)
    return forecast, True
