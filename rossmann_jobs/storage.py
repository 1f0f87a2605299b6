"""URI-addressed storage (local, file://, s3://, s3a://) with S3 retries, and the atomic output-commit protocol."""
from __future__ import annotations

import json
import logging
import os
import time
import uuid
from typing import Any, Callable, TypeVar
from urllib.parse import urlparse

from rossmann_jobs import commit_protocol as protocol
from rossmann_jobs.commit_protocol import MANIFEST_NAME, OutputNotCommittedError  # noqa: F401  (storage's API)

log = logging.getLogger("rossmann.storage")
T = TypeVar("T")


# Two layers of S3 retries, so a short outage of the endpoint (a restart, a network blip) does not fail a job:
# - every pyarrow S3 request: the AWS SDK's default strategy, attempt k after 25 ms x 2^k; 8 retries = ~6.4 s, silent;
# - every call of the functions below: retried while the error is a transient network/server one, after 1, 2, 4,
#   8, 8, ... s, each retry logged as a warning, until ROSSMANN_S3_RETRY_BUDGET_S (default 60 s) has passed; then
#   StorageUnavailableError. (Spark's own S3A retries are set in spark_session.s3a_conf.)
S3_SDK_RETRIES = 8
S3_RETRY_BUDGET_ENV, DEFAULT_S3_RETRY_BUDGET_S = "ROSSMANN_S3_RETRY_BUDGET_S", 60.0
MAX_RETRY_DELAY_S = 8.0
TRANSIENT_S3_ERRORS = ("NETWORK_CONNECTION", "curlCode", "SERVICE_UNAVAILABLE", "SLOW_DOWN", "INTERNAL_FAILURE",
                       "REQUEST_TIMEOUT", "THROTTLING", "Connection reset", "Couldn't connect",
                       "Could not connect")   # curl's wording in pyarrow 10 and in pyarrow 25


class StorageUnavailableError(OSError):
    """The S3 endpoint stayed unreachable for the whole retry budget."""


def is_s3(uri: str) -> bool:
    return urlparse(uri).scheme in ("s3", "s3a", "s3n")


def spark_uri(uri: str) -> str:
    """The form Spark's Hadoop FileSystem understands: s3:// -> s3a://, bare paths -> file:// absolute."""
    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3n"):
        return "s3a://" + uri.split("://", 1)[1]
    if parsed.scheme in ("", "file"):
        return "file://" + os.path.abspath(parsed.path if parsed.scheme else uri)
    return uri


def join(uri: str, *parts: str) -> str:
    base = uri.rstrip("/")
    return "/".join([base, *(p.strip("/") for p in parts)])


def s3_endpoint() -> str | None:
    """Endpoint override for S3-compatible servers (MinIO, moto); None means real AWS."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def filesystem(uri: str):
    """(pyarrow FileSystem, path inside it) for a URI. Credentials come from the environment only."""
    from pyarrow import fs

    parsed = urlparse(uri)
    if is_s3(uri):
        endpoint = s3_endpoint()
        kwargs: dict[str, Any] = {
            "region": os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or "us-east-1",
            "retry_strategy": fs.AwsDefaultS3RetryStrategy(max_attempts=S3_SDK_RETRIES),
        }
        if endpoint:
            ep = urlparse(endpoint)
            # pyarrow 15 has no force_virtual_addressing; with an endpoint override it uses path-style already.
            kwargs.update(endpoint_override=ep.netloc or ep.path, scheme=ep.scheme or "http")
        if os.environ.get("AWS_ACCESS_KEY_ID"):
            kwargs.update(access_key=os.environ["AWS_ACCESS_KEY_ID"],
                          secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
                          session_token=os.environ.get("AWS_SESSION_TOKEN") or None)
        return fs.S3FileSystem(**kwargs), parsed.netloc + parsed.path
    return fs.LocalFileSystem(), os.path.abspath(parsed.path if parsed.scheme == "file" else uri)


def _is_transient(error: OSError) -> bool:
    return any(marker in str(error) for marker in TRANSIENT_S3_ERRORS)


def with_retries(action: str, uri: str, call: Callable[[], T]) -> T:
    """call(), retried with logged back-off while S3 fails transiently, within the retry budget (S3 URIs only)."""
    if not is_s3(uri):
        return call()
    budget = float(os.environ.get(S3_RETRY_BUDGET_ENV, DEFAULT_S3_RETRY_BUDGET_S))
    deadline, delay, attempt = time.monotonic() + budget, 1.0, 1
    while True:
        try:
            return call()
        except OSError as error:
            left = deadline - time.monotonic()
            if not _is_transient(error):
                raise
            reason = str(error).strip().splitlines()[0][:300]
            if left <= 0:
                raise StorageUnavailableError(
                    f"S3 unavailable: {action} {uri} failed {attempt} times over the {budget:.0f} s retry budget "
                    f"(endpoint {s3_endpoint() or 'AWS default'}); last error: {reason}. Check that the endpoint "
                    f"is up and reachable; {S3_RETRY_BUDGET_ENV} sets the budget.") from error
            wait = min(delay, left)
            log.warning("S3 %s %s failed (attempt %d: %s); retrying in %.1f s, %.0f s of the %.0f s retry budget "
                        "left", action, uri, attempt, reason, wait, left, budget)
            time.sleep(wait)
            delay, attempt = min(2 * delay, MAX_RETRY_DELAY_S), attempt + 1


def exists(uri: str) -> bool:
    from pyarrow import fs

    filesys, path = filesystem(uri)
    return with_retries("stat", uri, lambda: filesys.get_file_info(path).type != fs.FileType.NotFound)


FILE, DIRECTORY = "file", "directory"


def file_type(uri: str) -> str | None:
    """FILE, DIRECTORY (a local folder, or an S3 prefix with objects under it) or None where nothing is."""
    from pyarrow import fs

    filesys, path = filesystem(uri)
    kind = with_retries("stat", uri, lambda: filesys.get_file_info(path).type)
    return {fs.FileType.File: FILE, fs.FileType.Directory: DIRECTORY}.get(kind)


def read_bytes(uri: str) -> bytes:
    filesys, path = filesystem(uri)

    def read() -> bytes:
        with filesys.open_input_stream(path) as stream:
            return stream.read()
    return with_retries("read", uri, read)


def sha256(uri: str) -> tuple[str, int]:
    """SHA-256 (hex) and size of one file, streamed."""
    import hashlib

    filesys, path = filesystem(uri)

    def digest() -> tuple[str, int]:
        hasher, size = hashlib.sha256(), 0
        with filesys.open_input_stream(path) as stream:
            while chunk := stream.read(1 << 20):
                hasher.update(chunk)
                size += len(chunk)
        return hasher.hexdigest(), size
    return with_retries("read", uri, digest)


# The type S3 serves an object with: without one pyarrow says application/octet-stream, and a browser downloads
# the report's index.html that its presigned link should show.
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".json": "application/json", ".csv": "text/csv; charset=utf-8"}


def write_bytes(uri: str, data: bytes) -> None:
    """Write one object. On S3 a single PUT is atomic (so retrying it is safe); locally a temp file is renamed."""
    filesys, path = filesystem(uri)
    if is_s3(uri):
        content_type = CONTENT_TYPES.get(os.path.splitext(path)[1])
        metadata = {"Content-Type": content_type} if content_type else None

        def put() -> None:
            with filesys.open_output_stream(path, metadata=metadata) as stream:
                stream.write(data)
        with_retries("write", uri, put)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_json(uri: str) -> Any:
    return json.loads(read_bytes(uri).decode("utf-8"))


def write_json(uri: str, obj: Any) -> None:
    write_bytes(uri, json.dumps(obj, indent=2, sort_keys=True, default=str).encode("utf-8"))


def list_files(uri: str) -> list[str]:
    """All files below a prefix, as URIs with the caller's scheme, sorted."""
    from pyarrow import fs

    filesys, path = filesystem(uri)
    infos = with_retries("list", uri, lambda: filesys.get_file_info(fs.FileSelector(path, recursive=True,
                                                                                    allow_not_found=True)))
    prefix, base = uri.rstrip("/"), path.rstrip("/")
    return sorted(prefix + info.path[len(base):] for info in infos if info.type == fs.FileType.File)


def parquet_files(uri: str) -> list[str]:
    """The Parquet data files below a prefix (a Spark output's _SUCCESS and checksums left out), sorted."""
    return [file_uri for file_uri in list_files(uri) if file_uri.endswith(".parquet")]


def delete_prefix(uri: str) -> None:
    filesys, path = filesystem(uri)
    if exists(uri):
        with_retries("delete", uri, lambda: filesys.delete_dir(path))


def download_dir(uri: str, local_dir: str) -> str:
    """Copy every file under a prefix to a local folder; returns the folder."""
    for file_uri in list_files(uri):
        rel = file_uri[len(uri.rstrip("/")) + 1:]
        target = os.path.join(local_dir, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(read_bytes(file_uri))
    return local_dir


def download_file(uri: str, local_path: str) -> str:
    """Stream one object to a local file (never whole in memory), through a temp name so a partial copy is never
    mistaken for a finished one; returns local_path."""
    from pyarrow import fs

    filesys, path = filesystem(uri)
    partial = f"{local_path}.partial"
    with_retries("download", uri, lambda: fs.copy_files(path, partial, source_filesystem=filesys,
                                                        destination_filesystem=fs.LocalFileSystem()))
    os.replace(partial, local_path)
    return local_path


def upload_dir(local_dir: str, uri: str) -> None:
    for root, _dirs, files in os.walk(local_dir):
        for name in files:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, local_dir).replace(os.sep, "/")
            with open(full, "rb") as handle:
                write_bytes(join(uri, rel), handle.read())


# --- Atomic commit protocol (rossmann_jobs/commit_protocol.py) -------------------------------------------------

def new_attempt_uri(out_uri: str) -> str:
    return join(out_uri, protocol.new_attempt_name())


def commit(out_uri: str, attempt_uri: str, summary: dict[str, Any] | None = None) -> dict:
    """Publish attempt_uri as the output at out_uri; then remove the attempts started before it: a newer one may
    still be written or committed by a concurrent run (commit_protocol)."""
    manifest = protocol.manifest_document(out_uri, attempt_uri, list_files(attempt_uri), summary)
    write_json(protocol.manifest_uri(out_uri), manifest)
    current = protocol.attempt_uri(out_uri, manifest)
    for attempt in protocol.older_attempts(sorted(_attempt_prefixes(out_uri)), current):
        delete_prefix(attempt)
    return manifest


def _attempt_prefixes(out_uri: str) -> set[str]:
    root = join(out_uri, protocol.ATTEMPTS_DIR)
    return {"/".join(f.split("/")[: len(root.split("/")) + 1]) for f in list_files(root)}


def read_manifest(out_uri: str) -> dict:
    if not exists(protocol.manifest_uri(out_uri)):
        raise protocol.not_committed(out_uri)
    return protocol.parse_manifest(read_bytes(protocol.manifest_uri(out_uri)), out_uri)


def committed_uri(out_uri: str) -> str:
    """The attempt prefix that holds the committed output at out_uri."""
    return protocol.attempt_uri(out_uri, read_manifest(out_uri))
