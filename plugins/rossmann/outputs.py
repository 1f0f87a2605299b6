"""Committed job outputs (rossmann_jobs/commit_protocol.py, the protocol the jobs write) read from S3 via S3Hook."""
from __future__ import annotations

import json
from typing import Any, Callable

from rossmann_jobs import commit_protocol as protocol
from rossmann_jobs.commit_protocol import OutputNotCommittedError  # noqa: F401  (raised by read_manifest)


def s3_bucket_key(uri: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// or s3a:// URI."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    return S3Hook.parse_s3_url(uri.replace("s3a://", "s3://", 1))


def exists(hook, uri: str) -> bool:
    bucket, key = s3_bucket_key(uri)
    return hook.check_for_key(key, bucket)


def read_json(hook, uri: str) -> Any:
    bucket, key = s3_bucket_key(uri)
    return json.loads(hook.read_key(key, bucket))


def write_json(hook, uri: str, obj: Any) -> None:
    """One PUT: on S3 readers see the old object or the new one, never a partial one."""
    bucket, key = s3_bucket_key(uri)
    hook.load_string(json.dumps(obj, indent=2, sort_keys=True), key, bucket, replace=True)


class ConcurrentUpdateError(RuntimeError):
    """A compare-and-set lost: the object changed (or appeared) after it was read, and kept changing on re-reads."""


# S3's answers to a conditional PUT whose condition no longer holds: 412 (the ETag or absence changed), 409 (another
# conditional write of the key is in flight), 404 (If-Match on an object deleted since).
_LOST_CONDITION = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409", "404"}
COMPARE_AND_SET_TRIES = 5


def _error_code(exc: Exception) -> str | None:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode"))


def read_json_versioned(hook, uri: str) -> tuple[Any, str | None]:
    """The object's JSON and its ETag from one GET (so the two belong together); (None, None) when absent."""
    bucket, key = s3_bucket_key(uri)
    try:
        response = hook.get_conn().get_object(Bucket=bucket, Key=key)
    except Exception as exc:
        if _error_code(exc) in ("NoSuchKey", "404"):
            return None, None
        raise
    return json.loads(response["Body"].read()), response["ETag"]


def write_json_if(hook, uri: str, obj: Any, etag: str | None) -> None:
    """One conditional PUT: written only if the object still has `etag` (If-Match) or, with None, still does not
    exist (If-None-Match: *); raises ConcurrentUpdateError otherwise. S3 decides the condition and the write as one
    step, so of two writers that read the same version exactly one succeeds."""
    bucket, key = s3_bucket_key(uri)
    condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
    try:
        hook.get_conn().put_object(Bucket=bucket, Key=key, Body=json.dumps(obj, indent=2, sort_keys=True).encode(),
                                   ContentType="application/json", **getattr(hook, "extra_args", {}), **condition)
    except Exception as exc:
        if _error_code(exc) in _LOST_CONDITION:
            raise ConcurrentUpdateError(f"{uri} changed since it was read ({_error_code(exc)} on a PUT "
                                        f"{'If-Match ' + etag if etag else 'If-None-Match *'})") from exc
        raise


def compare_and_set_json(hook, uri: str, change: Callable[[Any], Any]) -> Any:
    """Replace the JSON object at uri by change(current) (current: None when absent; change returns None to leave
    it), written only if nobody wrote it since it was read; a loser re-reads and calls change again on what the
    winner wrote, so every decision is made against the object it replaces. Returns what was written, or None."""
    for _ in range(COMPARE_AND_SET_TRIES):
        current, etag = read_json_versioned(hook, uri)
        new = change(current)
        if new is None:
            return None
        try:
            write_json_if(hook, uri, new, etag)
            return new
        except ConcurrentUpdateError:
            continue
    raise ConcurrentUpdateError(f"{uri} changed under every one of {COMPARE_AND_SET_TRIES} compare-and-set tries: "
                                "other writers keep replacing it; retry the task")


def list_uris(hook, prefix_uri: str) -> list[str]:
    """The s3:// URIs of the objects under prefix_uri/ (every page of the listing)."""
    bucket, key = s3_bucket_key(prefix_uri)
    prefix = f"{key.rstrip('/')}/"
    return [f"s3://{bucket}/{name}" for name in hook.list_keys(bucket_name=bucket, prefix=prefix) or []]


def read_manifest(hook, out_uri: str) -> dict[str, Any]:
    """`<out>/_SUCCESS`: the committed attempt (relative to out) and the files it holds."""
    if not exists(hook, protocol.manifest_uri(out_uri)):
        raise protocol.not_committed(out_uri)
    bucket, key = s3_bucket_key(protocol.manifest_uri(out_uri))
    return protocol.parse_manifest(hook.read_key(key, bucket), out_uri)


def committed_attempt_uri(hook, out_uri: str) -> str:
    """The attempt prefix named by `<out>/_SUCCESS`, like rossmann_jobs.storage.committed_uri."""
    return protocol.attempt_uri(out_uri, read_manifest(hook, out_uri))


def copy_files(hook, source_uri: str, target_uri: str, relative_paths: list[str]) -> None:
    """Server-side copy of source/<path> to target/<path> for each path (one atomic S3 copy each, < 5 GB)."""
    for path in relative_paths:
        hook.copy_object(f"{source_uri.rstrip('/')}/{path}", f"{target_uri.rstrip('/')}/{path}")


def read_bytes(hook, uri: str) -> bytes:
    bucket, key = s3_bucket_key(uri)
    return hook.get_key(key, bucket).get()["Body"].read()


def write_bytes(hook, uri: str, data: bytes) -> None:
    bucket, key = s3_bucket_key(uri)
    hook.load_bytes(data, key, bucket, replace=True)


def read_pointer(hook, uri: str) -> dict[str, Any] | None:
    """A pointer file's JSON (the champion, the latest forecast); None before the first one is written."""
    return read_json(hook, uri) if exists(hook, uri) else None


def train_summary(metrics: dict[str, Any], metrics_uri: str) -> dict[str, Any]:
    """The small subset of the train job's metrics.json that goes to XCom (pure)."""
    if "best_val_exp_rmspe" not in metrics:
        raise ValueError(f"{metrics_uri} has no 'best_val_exp_rmspe' key (keys: {sorted(metrics)}); "
                         "the train job's metrics contract is in docs/ARCHITECTURE.md")
    return {
        "best_val_exp_rmspe": float(metrics["best_val_exp_rmspe"]),
        "best_epoch": metrics.get("best_epoch"),
        "epochs_run": metrics.get("epochs_run"),
        "stopped_early": metrics.get("stopped_early"),
        "samples_per_s": metrics.get("mean_samples_per_second"),
        "horovod_size": metrics.get("horovod_size"),
        # exp_rmspe of challenger, champion and naive baseline on the same validation rows: what the gate compares.
        "gate_scores": metrics.get("gate_scores"),
        # Whether the run fine-tuned an earlier model (the champion as of its date) and which one.
        "warm_start": {key: (metrics.get("warm_start") or {}).get(key) for key in ("used", "requested", "reason")},
    }
