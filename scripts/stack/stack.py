"""The embedded stack on one machine: a moto S3 server and Airflow on SQLite, all on loopback, state under var/.

Run with the Airflow environment's Python (it needs only the standard library and boto3):

    python scripts/stack/stack.py [--state-dir DIR] s3-start | s3-stop | env | airflow-init | ui-start | ui-stop
                                                    | status | fetch S3_URI LOCAL_DIR

`env` prints `export` lines for the Airflow components (AIRFLOW_HOME, connections, PATH with the jobs
environment's spark-submit); the bash scripts `eval` it. Every long-lived process is started in its own session
(setsid) with its pid in `<state>/run/`, and stopped by signalling that process group, nothing broader.
Secrets (moto keys, the Airflow JWT secret, the admin password) are generated once into `<state>/secrets.json`
(mode 600): nothing secret is in the code or printed, except the local admin password by `ui-start`.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JOBS_BIN = REPO / ".venvs" / "jobs" / "bin"
AIRFLOW_BIN = REPO / ".venvs" / "airflow" / "bin"
DEFAULT_BUCKET = "rossmann"
DEFAULT_S3_PORT = 5455
DEFAULT_API_PORT = 8080
ADMIN_USER = "admin"
UI_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


@dataclass(frozen=True)
class Stack:
    """Where one stack keeps its state; tests use a temporary state dir so they never touch the user's var/."""

    state_dir: Path

    @property
    def airflow_home(self) -> Path:
        return self.state_dir / "airflow"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def passwords_file(self) -> Path:
        return self.airflow_home / "simple_auth_manager_passwords.json.generated"

    def pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def read_state(self, name: str) -> str | None:
        path = self.run_dir / name
        return path.read_text().strip() if path.exists() else None

    def write_state(self, name: str, value: str) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / name).write_text(value + "\n")


def default_stack() -> Stack:
    return Stack(Path(os.environ.get("ROSSMANN_STATE_DIR", REPO / "var")).resolve())


def free_port(preferred: int | None = None) -> int:
    """The preferred port if nothing listens on it, else one the kernel picks."""
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RuntimeError("no free port on 127.0.0.1")


def stack_secrets(stack: Stack) -> dict[str, str]:
    """Generated once per state dir; file readable by its owner only."""
    path = stack.state_dir / "secrets.json"
    if path.exists():
        return json.loads(path.read_text())
    stack.state_dir.mkdir(parents=True, exist_ok=True)
    values = {
        "s3_access_key_id": "rossmann-local",
        "s3_secret_access_key": secrets.token_urlsafe(24),
        "jwt_secret": secrets.token_urlsafe(32),
        "api_secret_key": secrets.token_urlsafe(32),
        "admin_password": secrets.token_urlsafe(12),
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(values, handle)
    return values


# --- processes --------------------------------------------------------------------------------------------------

def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_pid(stack: Stack, name: str) -> int | None:
    value = stack.read_state(f"{name}.pid")
    return int(value) if value and pid_alive(int(value)) else None


def start_process(stack: Stack, name: str, argv: list[str], env: dict[str, str]) -> int:
    """Start argv in a new session (its own process group), log to <state>/log/<name>.log, record its pid."""
    if (pid := running_pid(stack, name)) is not None:
        print(f"{name} already running (pid {pid})")
        return pid
    stack.log_dir.mkdir(parents=True, exist_ok=True)
    with open(stack.log_dir / f"{name}.log", "ab") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, cwd=REPO)
    stack.write_state(f"{name}.pid", str(process.pid))
    return process.pid


def stop_processes(stack: Stack, names: list[str], grace_s: float = 20.0) -> list[str]:
    """SIGTERM the process groups started for `names` together, SIGKILL what is left after a grace period.

    Returns the names that were running."""
    groups = {}
    for name in names:
        pid = running_pid(stack, name)
        stack.pid_file(name).unlink(missing_ok=True)
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGTERM)
                groups[name] = pid
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    alive = dict(groups)
    while alive and time.monotonic() < deadline:
        time.sleep(0.3)
        alive = {name: pid for name, pid in alive.items() if group_alive(pid)}
    for pid in alive.values():
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [name for name in names if name in groups]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_process(stack: Stack, name: str, grace_s: float = 20.0) -> bool:
    return bool(stop_processes(stack, [name], grace_s))


def wait_http(url: str, timeout_s: float, name: str, stack: Stack) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            # Not listening yet, or listening before its routes are mounted (uvicorn answers 404 meanwhile).
            if running_pid(stack, name) is None:
                break
            time.sleep(0.5)
    log = stack.log_dir / f"{name}.log"
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise RuntimeError(f"{name} did not answer at {url} within {timeout_s:.0f} s. Log {log}:\n{tail}")


# --- S3 (moto) --------------------------------------------------------------------------------------------------

def s3_endpoint(stack: Stack) -> str | None:
    port = stack.read_state("moto.port")
    return f"http://127.0.0.1:{port}" if port and running_pid(stack, "moto") else None


def start_s3(stack: Stack, port: int | None = None, bucket: str = DEFAULT_BUCKET) -> str:
    """Start moto's S3 server on loopback (if not running) and make sure the bucket exists; returns the endpoint."""
    endpoint = s3_endpoint(stack)
    if endpoint is None:
        port = free_port(port or DEFAULT_S3_PORT)
        start_process(stack, "moto", [str(JOBS_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                      {**os.environ})
        stack.write_state("moto.port", str(port))
        endpoint = f"http://127.0.0.1:{port}"
        wait_http(f"{endpoint}/moto-api/", 60, "moto", stack)
    create_bucket(stack, endpoint, bucket)
    return endpoint


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


# --- Airflow ----------------------------------------------------------------------------------------------------

def aws_env(stack: Stack, endpoint: str) -> dict[str, str]:
    """Standard AWS variables for the jobs environment's command-line tools (the lander, tests)."""
    keys = stack_secrets(stack)
    return {"AWS_ACCESS_KEY_ID": keys["s3_access_key_id"], "AWS_SECRET_ACCESS_KEY": keys["s3_secret_access_key"],
            "AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1"}


def airflow_env(stack: Stack, endpoint: str, api_port: int | None = None, spark_master: str = "local[2]",
                bucket: str = DEFAULT_BUCKET, parallelism: int = 4) -> dict[str, str]:
    """Settings shared by every Airflow component of the embedded stack (SQLite, LocalExecutor, loopback)."""
    keys = stack_secrets(stack)
    api_port = api_port or int(stack.read_state("api.port") or DEFAULT_API_PORT)
    home = stack.airflow_home
    spark_conn = {"conn_type": "spark", "host": spark_master,
                  "extra": {"spark_conf": {"spark.pyspark.python": str(JOBS_BIN / "python"),
                                           "spark.ui.enabled": "false"}}}
    aws_conn = {"conn_type": "aws", "login": keys["s3_access_key_id"], "password": keys["s3_secret_access_key"],
                "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(parallelism),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(parallelism),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(stack.passwords_file),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__SECRET_KEY": keys["api_secret_key"],
        "AIRFLOW__API_AUTH__JWT_SECRET": keys["jwt_secret"],
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_conn),
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws_conn),
        "ROSSMANN_BUCKET": bucket,
        "PATH": f"{JOBS_BIN}:{AIRFLOW_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def write_admin_password(stack: Stack) -> str:
    password = stack_secrets(stack)["admin_password"]
    stack.airflow_home.mkdir(parents=True, exist_ok=True)
    fd = os.open(stack.passwords_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({ADMIN_USER: password}, handle)
    return password


def airflow_init(stack: Stack, env: dict[str, str]) -> None:
    """Create/upgrade the SQLite metadata database and the admin login."""
    stack.airflow_home.mkdir(parents=True, exist_ok=True)
    write_admin_password(stack)
    subprocess.run([str(AIRFLOW_BIN / "airflow"), "db", "migrate"], env={**os.environ, **env}, check=True,
                   stdout=subprocess.DEVNULL)


def start_ui(stack: Stack, env: dict[str, str]) -> str:
    """api-server, scheduler, dag-processor and triggerer on loopback; returns the UI URL once it answers."""
    full_env = {**os.environ, **env}
    for component in UI_COMPONENTS:
        # serve-logs would listen on all interfaces; the api-server reads the local log files directly instead.
        skip_serve_logs = ["--skip-serve-logs"] if component in ("scheduler", "triggerer") else []
        start_process(stack, f"airflow-{component}", [str(AIRFLOW_BIN / "airflow"), component, *skip_serve_logs],
                      full_env)
    url = env["AIRFLOW__API__BASE_URL"]
    wait_http(f"{url}/api/v2/monitor/health", 180, "airflow-api-server", stack)
    return url


def stop_ui(stack: Stack) -> list[str]:
    stopped = stop_processes(stack, [f"airflow-{component}" for component in UI_COMPONENTS])
    return [name.removeprefix("airflow-") for name in stopped]


# --- CLI --------------------------------------------------------------------------------------------------------

def require_s3(stack: Stack) -> str:
    endpoint = s3_endpoint(stack)
    if endpoint is None:
        raise SystemExit("The S3 server is not running: start it with `stack.py s3-start` first.")
    return endpoint


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", type=Path, help="default: $ROSSMANN_STATE_DIR or <repo>/var")
    sub = parser.add_subparsers(dest="command", required=True)
    s3_start = sub.add_parser("s3-start", help="start moto S3 on 127.0.0.1 and create the bucket")
    s3_start.add_argument("--port", type=int, default=None)
    s3_start.add_argument("--bucket", default=os.environ.get("ROSSMANN_BUCKET", DEFAULT_BUCKET))
    sub.add_parser("s3-stop")
    env_cmd = sub.add_parser("env", help="print export lines for the Airflow components")
    env_cmd.add_argument("--with-aws", action="store_true", help="also export AWS_* for the jobs env's tools")
    sub.add_parser("airflow-init", help="airflow db migrate + admin password")
    ui_start = sub.add_parser("ui-start", help="start api-server, scheduler, dag-processor, triggerer")
    ui_start.add_argument("--port", type=int, default=None)
    sub.add_parser("ui-stop")
    sub.add_parser("status")
    fetch_cmd = sub.add_parser("fetch", help="download an s3:// object or prefix from the stack's S3")
    fetch_cmd.add_argument("uri")
    fetch_cmd.add_argument("local_dir", type=Path)
    args = parser.parse_args(argv)
    stack = Stack(args.state_dir.resolve()) if args.state_dir else default_stack()
    bucket = os.environ.get("ROSSMANN_BUCKET", DEFAULT_BUCKET)

    if args.command == "s3-start":
        print(f"S3 (moto) at {start_s3(stack, args.port, args.bucket)}, bucket s3://{args.bucket}")
    elif args.command == "s3-stop":
        print("moto stopped" if stop_process(stack, "moto") else "moto was not running")
    elif args.command == "env":
        endpoint = require_s3(stack)
        exports = airflow_env(stack, endpoint, bucket=bucket)
        if args.with_aws:
            exports.update(aws_env(stack, endpoint))
        print("\n".join(f"export {key}={shlex.quote(value)}" for key, value in exports.items()))
    elif args.command == "airflow-init":
        airflow_init(stack, airflow_env(stack, require_s3(stack), bucket=bucket))
        print(f"Airflow metadata DB ready in {stack.airflow_home}")
    elif args.command == "ui-start":
        if running_pid(stack, "airflow-api-server") is None:
            stack.write_state("api.port", str(free_port(args.port or DEFAULT_API_PORT)))
        env = airflow_env(stack, require_s3(stack), bucket=bucket)
        airflow_init(stack, env)
        url = start_ui(stack, env)
        print(f"Airflow UI: {url}  (user {ADMIN_USER}, password {stack_secrets(stack)['admin_password']})")
        print(f"Logs: {stack.log_dir}/airflow-*.log")
    elif args.command == "ui-stop":
        stopped = stop_ui(stack)
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    elif args.command == "fetch":
        for path in fetch(stack, require_s3(stack), args.uri, args.local_dir):
            print(path)
    elif args.command == "status":
        for name in ("moto", *(f"airflow-{c}" for c in UI_COMPONENTS)):
            pid = running_pid(stack, name)
            print(f"{name:24s} {'running, pid ' + str(pid) if pid else 'stopped'}")
        print(f"S3 endpoint: {s3_endpoint(stack) or '-'}")


if __name__ == "__main__":
    main(sys.argv[1:])
