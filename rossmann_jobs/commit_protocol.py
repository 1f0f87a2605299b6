"""The output-commit protocol that the jobs write and the DAG's tasks read: one definition, standard library only.

A job writes its output under `<out>/attempts/<stamp>-<id>/` and commits it by writing one small manifest object,
`<out>/_SUCCESS` (JSON: the attempt relative to `<out>`, the files it holds, when, and the job's summary). A single
PUT (or a local rename) is atomic, so a reader sees the previous committed attempt or the new one, never a
half-written result; a crashed or re-run task leaves at most an orphan attempt, which a later commit removes: a
commit removes only the attempts started before its own (older_attempts), never one that a concurrent writer
(a second run, a retry still writing) started since and may still be writing or committing.
rossmann_jobs.storage writes and reads it with pyarrow's filesystems, plugins/rossmann/outputs.py with the S3Hook;
both are installed from this module (the Airflow environment installs the package without its dependencies).
"""
from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timezone
from typing import Any

MANIFEST_NAME = "_SUCCESS"
ATTEMPTS_DIR = "attempts"
MANIFEST_KEYS = ("attempt", "committed_at", "files", "summary")


class OutputNotCommittedError(RuntimeError):
    """A job output has no `_SUCCESS` manifest: the job that writes it has not finished successfully."""


def manifest_uri(out_uri: str) -> str:
    return f"{out_uri.rstrip('/')}/{MANIFEST_NAME}"


def new_attempt_name(now: datetime | None = None) -> str:
    """`attempts/<UTC stamp>-<8 hex>`: attempts sort by time, and two at the same second never collide."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{ATTEMPTS_DIR}/{stamp}-{uuid.uuid4().hex[:8]}"


def older_attempts(attempts: list[str], committed: str) -> list[str]:
    """The attempts (names or URIs ending in `attempts/<stamp>-<id>`) started before `committed`, by their UTC
    stamps: those a commit of `committed` may remove. One started in the same second is kept (its order is
    unknown), as is any name that is not an attempt's."""
    def stamp(attempt: str) -> str | None:
        match = _ATTEMPT.search(attempt.rstrip("/"))
        return match.group(1) if match else None

    own = stamp(committed)
    if own is None:
        raise ValueError(f"{committed} is not an attempt (expected .../{ATTEMPTS_DIR}/<stamp>-<id>)")
    return [attempt for attempt in attempts if (stamp(attempt) or own) < own]


_ATTEMPT = re.compile(rf"(?:^|/){ATTEMPTS_DIR}/(\d{{8}}T\d{{6}}Z)-[0-9a-f]+$")


def manifest_document(out_uri: str, attempt_uri: str, files: list[str],
                      summary: dict[str, Any] | None) -> dict[str, Any]:
    """The manifest that commits attempt_uri (under out_uri) holding `files` (URIs under the attempt)."""
    out, attempt = out_uri.rstrip("/"), attempt_uri.rstrip("/")
    if not attempt.startswith(f"{out}/{ATTEMPTS_DIR}/"):
        raise ValueError(f"{attempt_uri} is not an attempt of {out_uri} (expected {out}/{ATTEMPTS_DIR}/...)")
    return {
        "attempt": attempt[len(out) + 1:],
        "committed_at": datetime.now(timezone.utc).isoformat(),
        "files": [uri[len(attempt) + 1:] for uri in files],
        "summary": summary or {},
    }


def not_committed(out_uri: str) -> OutputNotCommittedError:
    return OutputNotCommittedError(
        f"{out_uri} has no committed output ({manifest_uri(out_uri)} is missing): the task that writes it did not "
        "finish successfully. Clear and re-run that task first.")


def parse_manifest(text: str | bytes, out_uri: str) -> dict[str, Any]:
    """A manifest read back, checked: every key present and the attempt under `<out>/attempts/`."""
    try:
        manifest = json.loads(text)
    except ValueError as error:
        raise ValueError(f"{manifest_uri(out_uri)} is not a JSON manifest ({error})") from None
    missing = [key for key in MANIFEST_KEYS if not isinstance(manifest, dict) or key not in manifest]
    if missing:
        raise ValueError(f"{manifest_uri(out_uri)} lacks {missing}: not a commit manifest of this protocol")
    if not str(manifest["attempt"]).startswith(f"{ATTEMPTS_DIR}/") or ".." in str(manifest["attempt"]):
        raise ValueError(f"{manifest_uri(out_uri)} names attempt {manifest['attempt']!r}, not one under "
                         f"{ATTEMPTS_DIR}/")
    return manifest


def attempt_uri(out_uri: str, manifest: dict[str, Any]) -> str:
    """The committed attempt's prefix."""
    return f"{out_uri.rstrip('/')}/{manifest['attempt']}"
