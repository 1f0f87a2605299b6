"""Run-scoped storage URIs of one DAG run, computed from the bucket, the as-of date and the run id (pure)."""
from __future__ import annotations

import hashlib
import re
from datetime import date, datetime

from rossmann_jobs.features.drop_manifest import DROP_MARKER
from rossmann_jobs.output_layout import REPORT_PAGE, SCORES_SUMMARY_FILE, configured_bucket

HISTORY_SUFFIX = ".json"


RUN_KEY_HASH_CHARS = 8


def run_key(run_id: str) -> str:
    """A run id made safe for an S3 key and a Spark path, and distinct for distinct run ids: the readable part keeps
    [A-Za-z0-9._-] (other runs of characters -> '_'), then '-' and the first RUN_KEY_HASH_CHARS hex digits of the
    SHA-256 of the exact run id. Without the hash, `manual__2015-07-31T00:00:00+00:00` and
    `manual__2015-07-31T00_00_00_00_00` would share one key, so one run would commit into the other's prefixes."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("_.")
    if not readable:
        raise ValueError(f"run id {run_id!r} has no characters usable in a storage key")
    return f"{readable}-{hashlib.sha256(run_id.encode('utf-8')).hexdigest()[:RUN_KEY_HASH_CHARS]}"


def bucket_root(bucket: str | None = None) -> str:
    """`s3://<bucket>`; the configured bucket (output_layout.configured_bucket: $ROSSMANN_BUCKET) when None."""
    return f"s3://{bucket or configured_bucket()}"


def forecast_pointer_uri(bucket: str | None = None) -> str:
    """`forecast/latest.json`: the newest as-of date's published forecast (see publication.replaces_latest)."""
    return f"{bucket_root(bucket)}/forecast/latest.json"


def scores_summary_uri(bucket: str | None = None) -> str:
    """`forecast/scores/summary.json`: the score job's summary of every scored forecast."""
    return f"{bucket_root(bucket)}/forecast/scores/{SCORES_SUMMARY_FILE}"


def run_as_of(as_of_param: str | None, logical_date: datetime | None, run_after: datetime) -> date:
    """The run's data cut-off: the `as_of` param, else the logical date, else the date the run was due. A param
    later than the run's own date is refused: a future as-of would outrank every real run in `forecast/latest.json`
    (a newer as-of always replaces an older one) and make the lateness check see a fresh forecast for weeks."""
    run_day = (logical_date or run_after).date()
    if not as_of_param:
        return run_day
    as_of = date.fromisoformat(as_of_param)
    if as_of > run_day:
        raise ValueError(f"as_of {as_of.isoformat()} is after the run's own date {run_day.isoformat()} (its logical "
                         "date, or when it was triggered): a run cannot forecast from data of a day that has not come;"
                         " trigger it with that logical date instead, or leave as_of empty")
    return as_of


def configured_run_uris(as_of: date, run_id: str) -> dict[str, str]:
    """plan_run_uris in the configured bucket: what a DAG run plans."""
    return plan_run_uris(configured_bucket(), as_of, run_id)


def plan_run_uris(bucket: str, as_of: date, run_id: str) -> dict[str, str]:
    """Every URI a run reads or writes. Job outputs are run-scoped so reruns and backfills never collide."""
    day = as_of.isoformat()
    root = bucket_root(bucket)
    run_root = f"{root}/runs/{day}/{run_key(run_id)}"
    return {
        "as_of": day,
        "raw": f"{root}/raw/{day}",
        "raw_marker": f"{root}/raw/{day}/{DROP_MARKER}",
        "features": f"{run_root}/features",
        "model": f"{run_root}/model",
        "season_backtest": f"{run_root}/season_backtest",
        "predictions": f"{run_root}/predictions",
        "champion": f"{root}/models/champion.json",
        "champion_history": f"{root}/models/champions/history",
        "champion_record": champion_record_uri(f"{root}/models/champions/history", day),
        "champion_models": f"{root}/models/champions/{day}/{run_key(run_id)}",
        "forecast_pointer": forecast_pointer_uri(bucket),
        "forecast_history": f"{root}/forecast/history",
        "forecast_record": forecast_record_uri(f"{root}/forecast/history", day, run_key(run_id)),
        "forecast_published": f"{root}/forecast/published/{day}/{run_key(run_id)}",
        "scores": f"{root}/forecast/scores",
        "scores_summary": scores_summary_uri(bucket),
        "scores_report": f"{root}/forecast/scores/{REPORT_PAGE}",
        "scoring_forecasts": f"{run_root}/scoring/forecasts.json",
    }


def pinned_model_uri(champion_models_uri: str, model_attempt_uri: str) -> str:
    """Where the gate keeps its immutable copy of a promoted model attempt: one folder per attempt id."""
    return f"{champion_models_uri.rstrip('/')}/{model_attempt_uri.rstrip('/').rsplit('/', 1)[-1]}"


def published_forecast_uri(forecast_published_uri: str, predictions_attempt_uri: str) -> str:
    """Where publish_forecast keeps its immutable copy of a committed predict attempt: one folder per attempt id
    under `forecast/published/<as_of>/<run key>/`, a prefix only Airflow's identity writes."""
    return pinned_model_uri(forecast_published_uri, predictions_attempt_uri)


def champion_record_uri(history_uri: str, as_of: str) -> str:
    """The champion record promoted for one as-of date: `<history>/<YYYY-MM-DD>.json` (a later promotion for the
    same date replaces it)."""
    return f"{history_uri.rstrip('/')}/{as_of}{HISTORY_SUFFIX}"


def record_as_of(record_uri: str) -> str | None:
    """The as-of date a history record is named after; None for any other object under the history prefix."""
    name = record_uri.rstrip("/").rsplit("/", 1)[-1]
    day = name[:-len(HISTORY_SUFFIX)] if name.endswith(HISTORY_SUFFIX) else ""
    try:
        parsed = date.fromisoformat(day).isoformat()
    except ValueError:
        return None
    return parsed if parsed == day else None   # only the exact name champion_record_uri writes


def forecast_record_uri(history_uri: str, as_of: str, key: str) -> str:
    """A published forecast's registry record: `<history>/<YYYY-MM-DD>/<run key>.json` (a re-run replaces it)."""
    return f"{history_uri.rstrip('/')}/{as_of}/{key}{HISTORY_SUFFIX}"


def forecast_record_key(record_uri: str) -> tuple[str, str] | None:
    """(as_of, run key) of a registry record URI; None for any other object under the history prefix."""
    parts = record_uri.rstrip("/").rsplit("/", 2)
    if len(parts) < 3 or not parts[2].endswith(HISTORY_SUFFIX) or record_as_of(parts[1] + HISTORY_SUFFIX) is None:
        return None
    key = parts[2][:-len(HISTORY_SUFFIX)]
    return (parts[1], key) if key and re.fullmatch(r"[A-Za-z0-9._-]+", key) else None
