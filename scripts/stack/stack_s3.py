"""The embedded S3: moto's server with its state on disk (s3_server.py), the bucket, and fetching objects."""
from __future__ import annotations

import json
import os
from pathlib import Path

from s3_guard import HEALTH_PATH
from stack_processes import running_pid, start_process, wait_http
from stack_state import DEFAULT_BUCKET, JOBS_BIN, Stack, free_port, stack_secrets

DEFAULT_S3_PORT = 5455


def s3_endpoint(stack: Stack) -> str | None:
    port = stack.read_state("moto.port")
    return f"http://127.0.0.1:{port}" if port and running_pid(stack, "moto") else None


def start_s3(stack: Stack, port: int | None = None, bucket: str = DEFAULT_BUCKET) -> str:
    """Start the S3 server (moto, on disk: s3_server.py) on loopback if not running and make sure the bucket exists;
    returns the endpoint. What an earlier server of this state dir stored is there again."""
    endpoint = s3_endpoint(stack)
    if endpoint is None:
        port = free_port(port or DEFAULT_S3_PORT)
        start_process(stack, "moto", [str(JOBS_BIN / "python"), str(Path(__file__).with_name("s3_server.py")),
                                      "-H", "127.0.0.1", "-p", str(port), "--data-dir", str(stack.s3_dir),
                                      "--credentials", str(write_server_credentials(stack))],
                      {**os.environ})
        stack.write_state("moto.port", str(port))
        endpoint = f"http://127.0.0.1:{port}"
        wait_http(f"{endpoint}{HEALTH_PATH}", 60, "moto", stack)
    create_bucket(stack, endpoint, bucket)
    return endpoint


def write_server_credentials(stack: Stack) -> Path:
    """The keys the S3 server answers (a file, readable by its owner only: never in a process's environment)."""
    keys = stack_secrets(stack)
    path = stack.state_dir / "s3_server_keys.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({keys["s3_access_key_id"]: keys["s3_secret_access_key"]}, handle)
    return path


def create_bucket(stack: Stack, endpoint: str, bucket: str) -> None:
    import boto3

    keys = stack_secrets(stack)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=keys["s3_access_key_id"],
                          aws_secret_access_key=keys["s3_secret_access_key"])
    existing = {entry["Name"] for entry in client.list_buckets().get("Buckets", [])}
    if bucket not in existing:
        client.create_bucket(Bucket=bucket)


def fetch(stack: Stack, endpoint: str, uri: str, local_dir: Path) -> list[Path]:
    """Copy one object, or every object under a prefix, from the stack's S3 to a local folder."""
    import boto3

    keys = stack_secrets(stack)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=keys["s3_access_key_id"],
                          aws_secret_access_key=keys["s3_secret_access_key"])
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    listed = client.list_objects_v2(Bucket=bucket, Prefix=key.rstrip("/") + "/").get("Contents", [])
    objects = [entry["Key"] for entry in listed] or [key]
    base = key.rstrip("/") + "/" if listed else key.rsplit("/", 1)[0] + "/"
    written = []
    for name in objects:
        target = local_dir / name[len(base):]
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, name, str(target))
        written.append(target)
    return written
