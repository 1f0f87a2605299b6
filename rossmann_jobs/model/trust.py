"""Which model files a job may load: only under the storage root's models/ and runs/, only as recorded (SHA-256).

Standard library only: the gate (Airflow side) records the digests with sha256_hex/encode_digests, the jobs check
them with check_digest. The storage root is the configured bucket (`s3://$ROSSMANN_BUCKET`), or a local folder or
other URI from ROSSMANN_STORAGE_ROOT (tests, a local demo): the same rule either way, so a local path is checked as
meaningfully as an s3:// URI.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from urllib.parse import urlparse

from rossmann_jobs.output_layout import MODEL_FILES, MODEL_PREFIXES, configured_bucket

STORAGE_ROOT_ENV = "ROSSMANN_STORAGE_ROOT"
# Where the digests are recorded: the train job's commit summary, then the champion record
# (plugins/rossmann/forecast_tasks.py).
DIGESTS_KEY = "model_sha256"
_HEX64 = re.compile(r"[0-9a-f]{64}")


class ModelRefusedError(RuntimeError):
    """A model the job will not load (its location, its digests or its format); the message says which and why."""


class UntrustedModelError(ModelRefusedError):
    """The model lies outside the allowed prefixes, or its files are not the ones recorded (SHA-256)."""


class IncompatibleModelError(ModelRefusedError):
    """The model is not in this code's format (e.g. an earlier release's whole-model HDF5): never loaded."""


def storage_root() -> str:
    return os.environ.get(STORAGE_ROOT_ENV) or f"s3://{configured_bucket()}"


def _normalised(uri: str) -> tuple[str, str]:
    """(scheme, path) with s3a/s3n spelled s3, local paths absolute and '.'/'..' resolved, no trailing '/'."""
    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a", "s3n"):
        # S3 keys have no '..' semantics, but a key containing such a segment is never one this project writes.
        segments = uri.split("://", 1)[1].split("/")
        if any(segment in (".", "..") for segment in segments):
            return "s3", ""
        return "s3", "/".join(segment for segment in segments if segment)
    if parsed.scheme in ("", "file"):
        path = parsed.path if parsed.scheme else uri
        return "file", os.path.realpath(path).rstrip("/")
    return parsed.scheme, posixpath.normpath(uri.split("://", 1)[1])


def allowed_prefixes(root: str | None = None) -> list[str]:
    root = root or storage_root()
    return [f"{root.rstrip('/')}/{prefix}/" for prefix in MODEL_PREFIXES]


def check_model_location(model_uri: str, root: str | None = None) -> None:
    """Raise UntrustedModelError unless model_uri lies under <root>/models/ or <root>/runs/."""
    root = root or storage_root()
    scheme, path = _normalised(model_uri)
    root_scheme, root_path = _normalised(root)
    inside = path and scheme == root_scheme and any(
        path.startswith(f"{root_path}/{prefix}/") for prefix in MODEL_PREFIXES)
    if not inside:
        raise UntrustedModelError(
            f"model {model_uri} lies outside {allowed_prefixes(root)}: models are loaded only from the storage "
            f"root's {' and '.join(p + '/' for p in MODEL_PREFIXES)} (root: ${STORAGE_ROOT_ENV}, else "
            "s3://$ROSSMANN_BUCKET).")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_digests(digests: dict[str, str]) -> str:
    """The digests as one command-line argument / XCom string (compact JSON, sorted); "" for none."""
    return json.dumps(digests, sort_keys=True, separators=(",", ":")) if digests else ""


def decode_digests(text: str | dict | None) -> dict[str, str]:
    """{model file (relative to the attempt): SHA-256 hex} from encode_digests' text; {} for none."""
    if not text:
        return {}
    digests = json.loads(text) if isinstance(text, str) else text
    if not isinstance(digests, dict) or not all(
            key in MODEL_FILES and isinstance(value, str) and _HEX64.fullmatch(value)
            for key, value in digests.items()):
        raise ValueError(f"model digests must map {list(MODEL_FILES)} to SHA-256 hex digests, got {text!r}")
    return digests


def check_digest(attempt_uri: str, relative: str, data: bytes, expected: dict[str, str]) -> None:
    """Raise UntrustedModelError unless `data` (attempt/relative as read) has the recorded SHA-256."""
    uri = f"{attempt_uri.rstrip('/')}/{relative}"
    if relative not in expected:
        raise UntrustedModelError(f"{uri}: no SHA-256 recorded for it (champion record `model_sha256`, or the train "
                                  "output's manifest): a model is loaded only as recorded. Not loaded.")
    actual = sha256_hex(data)
    if actual != expected[relative]:
        raise UntrustedModelError(f"{uri}: SHA-256 {actual} differs from the recorded {expected[relative]}: the file "
                                  "changed after the model was recorded. Not loaded.")
