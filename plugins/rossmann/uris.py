"""Run-scoped storage URIs of one DAG run, computed from the bucket, the as-of date and the run id (pure)."""
from __future__ import annotations

import re
from datetime import date

RAW_MARKER = "_SUCCESS"


def run_key(run_id: str) -> str:
    """A run id made safe for an S3 key and a Spark path: keeps [A-Za-z0-9._-], other runs of characters -> '_'."""
    key = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("_.")
    if not key:
        raise ValueError(f"run id {run_id!r} has no characters usable in a storage key")
    return key


def plan_run_uris(bucket: str, as_of: date, run_id: str) -> dict[str, str]:
    """Every URI a run reads or writes. Job outputs are run-scoped so reruns and backfills never collide."""
    day = as_of.isoformat()
    root = f"s3://{bucket}"
    run_root = f"{root}/runs/{day}/{run_key(run_id)}"
    return {
        "as_of": day,
        "raw": f"{root}/raw/{day}",
        "raw_marker": f"{root}/raw/{day}/{RAW_MARKER}",
        "features": f"{run_root}/features",
        "model": f"{run_root}/model",
        "predictions": f"{run_root}/predictions",
        "champion": f"{root}/models/champion.json",
        "champion_models": f"{root}/models/champions/{day}/{run_key(run_id)}",
        "forecast_pointer": f"{root}/forecast/latest.json",
    }


def pinned_model_uri(champion_models_uri: str, model_attempt_uri: str) -> str:
    """Where the gate keeps its immutable copy of a promoted model attempt: one folder per attempt id."""
    return f"{champion_models_uri.rstrip('/')}/{model_attempt_uri.rstrip('/').rsplit('/', 1)[-1]}"
