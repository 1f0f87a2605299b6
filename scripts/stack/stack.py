"""The embedded stack on one machine: a moto S3 server and Airflow on SQLite, all on loopback, state under var/.
Optionally, as production runs it: Airflow's metadata on a private PostgreSQL server and the jobs on a Spark
standalone cluster (a master and workers), both on loopback too.

Run with the Airflow environment's Python (it needs only the standard library and boto3):

    python scripts/stack/stack.py [--state-dir DIR] s3-start | s3-stop | env | airflow-init | ui-start | ui-stop
                                                    | pg-start | pg-stop | spark-start | spark-stop
                                                    | status | fetch S3_URI LOCAL_DIR

`env` prints `export` lines for the Airflow components (AIRFLOW_HOME, connections, PATH with the jobs
environment's spark-submit); the bash scripts `eval` it. Every long-lived process is started in its own session
(setsid) with its pid in `<state>/run/`, and stopped by signalling that process group, nothing broader
(PostgreSQL: `pg_ctl start/stop`, which manage its postmaster by the pid in its data folder).
Secrets (moto keys, the Airflow JWT secret, the admin password, the PostgreSQL role's password) are generated once
into `<state>/secrets.json` (mode 600): nothing secret is in the code or printed, except the local admin password
by `ui-start` (and `env`, whose exports carry the connection settings).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JOBS_BIN = REPO / ".venvs" / "jobs" / "bin"
AIRFLOW_BIN = REPO / ".venvs" / "airflow" / "bin"
DEFAULT_BUCKET = "rossmann"
DEFAULT_S3_PORT = 5455
DEFAULT_API_PORT = 8080
SHARED_AIRFLOW_ENV = REPO / "docker" / "airflow.env"   # settings this stack and docker-compose.yaml share
ADMIN_USER = "admin"
UI_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
DEFAULT_POSTGRES_PORT = 5439
POSTGRES_BIN_GLOB = "/usr/lib/postgresql/*/bin/initdb"   # Debian's server binaries, one folder per major version
POSTGRES_OS_USER = "postgres"
AIRFLOW_DB_ROLE = "airflow"
DEFAULT_SPARK_PORT = 7077


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
    def s3_dir(self) -> Path:
        """The embedded S3's buckets and objects (s3_server.py), kept across stops like Airflow's database."""
        return self.state_dir / "s3"

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
    """Generated once per state dir (keys added later are filled in); file readable by its owner only."""
    path = stack.state_dir / "secrets.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    generated = {
        "s3_access_key_id": "rossmann-local",
        "s3_secret_access_key": secrets.token_urlsafe(24),
        "jwt_secret": secrets.token_urlsafe(32),
        "api_secret_key": secrets.token_urlsafe(32),
        "admin_password": secrets.token_urlsafe(12),
        "postgres_password": secrets.token_urlsafe(24),
    }
    if set(generated) <= set(stored):
        return stored
    values = {**generated, **stored}
    stack.state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(values, handle)
    return values


# --- processes --------------------------------------------------------------------------------------------------

def reap(pid: int) -> None:
    """Collect pid's exit status if it is an exited child of ours: until then it is a zombie and looks alive."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def pid_alive(pid: int) -> bool:
    reap(pid)
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
    reap(pgid)   # a leader we started and that has exited stays a zombie (and "alive") until we reap it
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
    """Start the S3 server (moto, on disk: s3_server.py) on loopback if not running and make sure the bucket exists;
    returns the endpoint. What an earlier server of this state dir stored is there again."""
    endpoint = s3_endpoint(stack)
    if endpoint is None:
        port = free_port(port or DEFAULT_S3_PORT)
        start_process(stack, "moto", [str(JOBS_BIN / "python"), str(Path(__file__).with_name("s3_server.py")),
                                      "-H", "127.0.0.1", "-p", str(port), "--data-dir", str(stack.s3_dir)],
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


# --- PostgreSQL (Airflow metadata as production keeps it) ---------------------------------------------------------

def postgres_bin_dir() -> Path:
    """The newest Debian PostgreSQL server installed (/usr/lib/postgresql/<major>/bin)."""
    found = [Path(path).parent for path in glob.glob(POSTGRES_BIN_GLOB)]
    if not found:
        raise RuntimeError(f"no PostgreSQL server binaries match {POSTGRES_BIN_GLOB}: install Debian's `postgresql` "
                           "package (scripts/setup_system.sh does)")
    return max(found, key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0)


def as_postgres_user(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run its tools as the `postgres` OS user."""
    return ["runuser", "-u", POSTGRES_OS_USER, "--", *argv] if os.geteuid() == 0 else argv


def postgres_root(stack: Stack) -> Path | None:
    value = stack.read_state("postgres.dir")
    return Path(value) if value else None


def start_postgres(stack: Stack, data_root: Path | None = None, port: int | None = None) -> int:
    """A private PostgreSQL server on 127.0.0.1 (initialised on first use); returns its port.

    data_root (default <state>/postgres) holds the cluster (`data/`), its log and its Unix socket; as root it is
    handed to the `postgres` user, so every folder above it must be traversable by that user (e.g. under /tmp).
    Only that user reaches the socket (trust); TCP logins need a password (scram-sha-256)."""
    if (pid := running_pid(stack, "postgres")) is not None:
        print(f"postgres already running (pid {pid})")
        return int(stack.read_state("postgres.port"))
    root = (data_root or postgres_root(stack) or stack.state_dir / "postgres").resolve()
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    if os.geteuid() == 0:
        shutil.chown(root, POSTGRES_OS_USER, POSTGRES_OS_USER)
    bin_dir, data = postgres_bin_dir(), root / "data"
    if not (data / "PG_VERSION").exists():
        subprocess.run(as_postgres_user([str(bin_dir / "initdb"), "-D", str(data), "-U", POSTGRES_OS_USER,
                                         "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8"]),
                       check=True, stdout=subprocess.DEVNULL, cwd=root)
    port = free_port(port or DEFAULT_POSTGRES_PORT)
    server_options = f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={shlex.quote(str(root))}"
    started = subprocess.run(as_postgres_user([str(bin_dir / "pg_ctl"), "start", "-D", str(data), "-w", "-t", "60",
                                               "-l", str(root / "postgres.log"), "-o", server_options]),
                             capture_output=True, text=True, cwd=root)
    if started.returncode != 0:
        log = root / "postgres.log"
        raise RuntimeError(f"PostgreSQL did not start: {started.stdout}{started.stderr}\n"
                           f"{log.read_text(errors='replace')[-3000:] if log.exists() else ''}")
    stack.write_state("postgres.pid", (data / "postmaster.pid").read_text().splitlines()[0])
    stack.write_state("postgres.port", str(port))
    stack.write_state("postgres.dir", str(root))
    password = stack_secrets(stack)["postgres_password"]
    # Through stdin, so the password is never on a command line.
    run_psql(stack, f"""DO $$ BEGIN
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{AIRFLOW_DB_ROLE}') THEN
            CREATE ROLE {AIRFLOW_DB_ROLE} LOGIN PASSWORD '{password}';
        END IF; END $$;""")
    return port


def run_psql(stack: Stack, sql: str) -> str:
    root, port = postgres_root(stack), stack.read_state("postgres.port")
    result = subprocess.run(as_postgres_user([str(postgres_bin_dir() / "psql"), "-h", str(root), "-p", port, "-U",
                                              POSTGRES_OS_USER, "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qAt"]),
                            input=sql, capture_output=True, text=True, cwd=root)
    if result.returncode != 0:
        raise RuntimeError(f"psql failed: {result.stderr.strip()}")
    return result.stdout


def postgres_database(stack: Stack, name: str) -> str:
    """Create database `name` (if absent) owned by the Airflow role; returns its SQLAlchemy URL."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise ValueError(f"database name {name!r}: use lower-case letters, digits and _")
    if running_pid(stack, "postgres") is None:
        raise RuntimeError("the PostgreSQL server is not running: start it with `stack.py pg-start` first")
    run_psql(stack, f"SELECT 'CREATE DATABASE {name} OWNER {AIRFLOW_DB_ROLE}' "
                    f"WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '{name}')\\gexec\n")
    password = urllib.parse.quote(stack_secrets(stack)["postgres_password"], safe="")
    return (f"postgresql+psycopg2://{AIRFLOW_DB_ROLE}:{password}@127.0.0.1:{stack.read_state('postgres.port')}"
            f"/{name}")


def stop_postgres(stack: Stack) -> bool:
    """pg_ctl stop (fast: disconnects clients) of the server this stack started; False if none was running."""
    pid, root = running_pid(stack, "postgres"), postgres_root(stack)
    stack.pid_file("postgres").unlink(missing_ok=True)
    if pid is None or root is None:
        return False
    subprocess.run(as_postgres_user([str(postgres_bin_dir() / "pg_ctl"), "stop", "-D", str(root / "data"),
                                     "-m", "fast", "-w", "-t", "60"]), check=True, stdout=subprocess.DEVNULL,
                   cwd=root)
    return True


# --- Spark standalone cluster -------------------------------------------------------------------------------------

def spark_master_url(stack: Stack) -> str | None:
    port = stack.read_state("spark-master.port")
    return f"spark://127.0.0.1:{port}" if port and running_pid(stack, "spark-master") else None


def spark_cluster_status(stack: Stack) -> dict:
    """The master's own view (its web UI's JSON): workers with their state, cores and memory."""
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.read_state('spark-master.webui')}/json", timeout=10) as r:
        return json.load(r)


def start_spark_cluster(stack: Stack, workers: int = 2, cores: int = 1, memory: str = "2g",
                        port: int | None = None, timeout_s: float = 180) -> str:
    """A Spark standalone master and `workers` workers on 127.0.0.1, from the jobs environment's Spark; returns
    the master URL once every worker has registered. Each worker offers `cores` cores and `memory`."""
    if (url := spark_master_url(stack)) is not None:
        return url
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PATH": f"{JOBS_BIN}:{os.environ.get('PATH', '')}"}
    spark_class = str(JOBS_BIN / "spark-class")
    port, webui = free_port(port or DEFAULT_SPARK_PORT), free_port()
    start_process(stack, "spark-master", [spark_class, "org.apache.spark.deploy.master.Master", "--host",
                                          "127.0.0.1", "--port", str(port), "--webui-port", str(webui)], env)
    stack.write_state("spark-master.port", str(port))
    stack.write_state("spark-master.webui", str(webui))
    stack.write_state("spark-workers", str(workers))
    url = f"spark://127.0.0.1:{port}"
    wait_http(f"http://127.0.0.1:{webui}/json", timeout_s, "spark-master", stack)
    for index in range(1, workers + 1):
        work_dir = spark_worker_dir(stack, index)
        work_dir.mkdir(parents=True, exist_ok=True)
        start_process(stack, f"spark-worker-{index}",
                      [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores",
                       str(cores), "--memory", memory, "--webui-port", str(free_port()), "--work-dir", str(work_dir),
                       url], env)
    deadline = time.monotonic() + timeout_s
    while (alive := spark_cluster_status(stack).get("aliveworkers", 0)) < workers:
        if time.monotonic() > deadline:
            logs = "\n".join(f"{name}: {(stack.log_dir / f'{name}.log').read_text(errors='replace')[-1500:]}"
                             for name in ["spark-master"] + [f"spark-worker-{i}" for i in range(1, workers + 1)])
            raise RuntimeError(f"only {alive} of {workers} Spark workers registered with {url} within "
                               f"{timeout_s:.0f} s:\n{logs}")
        time.sleep(1)
    return url


def spark_worker_dir(stack: Stack, index: int) -> Path:
    """Where worker `index` (1-based) puts its executors: <dir>/<application id>/<executor id>/."""
    return stack.state_dir / "spark" / f"worker-{index}"


def stop_spark_cluster(stack: Stack) -> list[str]:
    """Workers first (their executors are in their process groups), then the master."""
    workers = int(stack.read_state("spark-workers") or 0)
    stopped = stop_processes(stack, [f"spark-worker-{index}" for index in range(1, workers + 1)])
    return stopped + stop_processes(stack, ["spark-master"])


def spark_cluster_conf(stack: Stack, executor_memory: str = "1g") -> dict[str, str]:
    """Settings for jobs on this cluster: one executor per worker core, all cores for one application."""
    status = spark_cluster_status(stack)
    return {"spark.cores.max": str(status["cores"]), "spark.executor.cores": "1",
            "spark.executor.memory": executor_memory}


# --- Airflow ----------------------------------------------------------------------------------------------------

def aws_env(stack: Stack, endpoint: str) -> dict[str, str]:
    """Standard AWS variables for the jobs environment's command-line tools (the lander, tests)."""
    keys = stack_secrets(stack)
    return {"AWS_ACCESS_KEY_ID": keys["s3_access_key_id"], "AWS_SECRET_ACCESS_KEY": keys["s3_secret_access_key"],
            "AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1"}


def shared_airflow_settings(path: Path = SHARED_AIRFLOW_ENV) -> dict[str, str]:
    """The KEY=VALUE lines of the env file both stacks read (comments and blank lines skipped)."""
    settings = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, separator, value = line.partition("=")
            if not separator:
                raise ValueError(f"{path}: {line!r} is not KEY=VALUE")
            settings[key.strip()] = value.strip()
    return settings


def airflow_env(stack: Stack, endpoint: str, api_port: int | None = None, spark_master: str = "local[2]",
                bucket: str = DEFAULT_BUCKET, parallelism: int = 4, sql_alchemy_conn: str | None = None,
                spark_conf: dict[str, str] | None = None) -> dict[str, str]:
    """Settings shared by every Airflow component of the embedded stack (LocalExecutor, loopback).

    Metadata on SQLite in the Airflow home unless sql_alchemy_conn names another database (PostgreSQL:
    `postgres_database`); spark_conf adds settings to the spark_default connection (e.g. `spark_cluster_conf`)."""
    keys = stack_secrets(stack)
    api_port = api_port or int(stack.read_state("api.port") or DEFAULT_API_PORT)
    home = stack.airflow_home
    spark_conn = {"conn_type": "spark", "host": spark_master,
                  "extra": {"spark_conf": {"spark.pyspark.python": str(JOBS_BIN / "python"),
                                           "spark.ui.enabled": "false", **(spark_conf or {})}}}
    aws_conn = {"conn_type": "aws", "login": keys["s3_access_key_id"], "password": keys["s3_secret_access_key"],
                "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    return {
        # Executor, examples, paused DAGs, deferrable sensors (`airflow dags test` runs a deferred trigger inline
        # and without its timeout: the demo lands the drop before it runs), API timeout: as in docker-compose.yaml.
        **shared_airflow_settings(),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__PARALLELISM": str(parallelism),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(parallelism),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(stack.passwords_file),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_alchemy_conn or f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__SECRET_KEY": keys["api_secret_key"],
        "AIRFLOW__API_AUTH__JWT_SECRET": keys["jwt_secret"],
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
    """Create/upgrade the metadata database, the admin login and the Spark pool."""
    stack.airflow_home.mkdir(parents=True, exist_ok=True)
    write_admin_password(stack)
    subprocess.run([str(AIRFLOW_BIN / "airflow"), "db", "migrate"], env={**os.environ, **env}, check=True,
                   stdout=subprocess.DEVNULL)
    # The Spark pool the DAG's spark-submit tasks share (plugins/rossmann/pools.py).
    subprocess.run([str(AIRFLOW_BIN / "python"), "-m", "rossmann.pools"], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, **env, "PYTHONPATH": str(REPO / "plugins")})


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


def stack_airflow_env(stack: Stack, bucket: str) -> dict[str, str]:
    """The CLI's Airflow settings: metadata on the stack's PostgreSQL server (database `airflow`) and jobs on its
    Spark standalone cluster when those were started (pg-start, spark-start), else SQLite and local[2]."""
    endpoint = require_s3(stack)
    database = postgres_database(stack, "airflow") if running_pid(stack, "postgres") else None
    master = spark_master_url(stack)
    return airflow_env(stack, endpoint, bucket=bucket, sql_alchemy_conn=database,
                       spark_master=master or "local[2]", spark_conf=spark_cluster_conf(stack) if master else None)


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
    pg_start = sub.add_parser("pg-start", help="start a private PostgreSQL server on 127.0.0.1 for Airflow's metadata")
    pg_start.add_argument("--port", type=int, default=None)
    pg_start.add_argument("--data-dir", type=Path, default=None, help="default: <state>/postgres")
    sub.add_parser("pg-stop")
    spark_start = sub.add_parser("spark-start", help="start a Spark standalone master and workers on 127.0.0.1")
    spark_start.add_argument("--workers", type=int, default=2)
    spark_start.add_argument("--cores", type=int, default=1, help="per worker")
    spark_start.add_argument("--memory", default="2g", help="per worker")
    spark_start.add_argument("--port", type=int, default=None)
    sub.add_parser("spark-stop")
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
        exports = stack_airflow_env(stack, bucket)
        if args.with_aws:
            exports.update(aws_env(stack, require_s3(stack)))
        print("\n".join(f"export {key}={shlex.quote(value)}" for key, value in exports.items()))
    elif args.command == "airflow-init":
        env = stack_airflow_env(stack, bucket)
        airflow_init(stack, env)
        print(f"Airflow metadata DB ready ({env['AIRFLOW__DATABASE__SQL_ALCHEMY_CONN'].split(':')[0]})")
    elif args.command == "ui-start":
        if running_pid(stack, "airflow-api-server") is None:
            stack.write_state("api.port", str(free_port(args.port or DEFAULT_API_PORT)))
        env = stack_airflow_env(stack, bucket)
        airflow_init(stack, env)
        url = start_ui(stack, env)
        print(f"Airflow UI: {url}  (user {ADMIN_USER}, password {stack_secrets(stack)['admin_password']})")
        print(f"Logs: {stack.log_dir}/airflow-*.log")
    elif args.command == "ui-stop":
        stopped = stop_ui(stack)
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    elif args.command == "pg-start":
        port = start_postgres(stack, args.data_dir, args.port)
        postgres_database(stack, "airflow")
        print(f"PostgreSQL on 127.0.0.1:{port}, database `airflow` (role {AIRFLOW_DB_ROLE}, password in "
              f"{stack.state_dir / 'secrets.json'}); env/airflow-init/ui-start now use it")
    elif args.command == "pg-stop":
        print("postgres stopped" if stop_postgres(stack) else "postgres was not running")
    elif args.command == "spark-start":
        url = start_spark_cluster(stack, args.workers, args.cores, args.memory, args.port)
        print(f"Spark master {url} (web UI http://127.0.0.1:{stack.read_state('spark-master.webui')}) with "
              f"{args.workers} workers; env/ui-start now point spark_default at it")
    elif args.command == "spark-stop":
        print(f"stopped: {', '.join(stop_spark_cluster(stack)) or 'nothing was running'}")
    elif args.command == "fetch":
        for path in fetch(stack, require_s3(stack), args.uri, args.local_dir):
            print(path)
    elif args.command == "status":
        workers = int(stack.read_state("spark-workers") or 0)
        for name in ("moto", "postgres", "spark-master", *(f"spark-worker-{i}" for i in range(1, workers + 1)),
                     *(f"airflow-{c}" for c in UI_COMPONENTS)):
            pid = running_pid(stack, name)
            print(f"{name:24s} {'running, pid ' + str(pid) if pid else 'stopped'}")
        print(f"S3 endpoint: {s3_endpoint(stack) or '-'}")
        print(f"Spark master: {spark_master_url(stack) or '-'}")


if __name__ == "__main__":
    main(sys.argv[1:])
