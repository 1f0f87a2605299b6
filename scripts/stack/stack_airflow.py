"""Airflow of the embedded stack: its environment (shared settings from docker/airflow.env), metadata DB and UI."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from rossmann_jobs.launch_settings import CLASS_ARCHIVE_ENV, jobs_env_class_archive
from stack_processes import start_process, stop_processes, wait_http
from stack_state import AIRFLOW_BIN, DEFAULT_BUCKET, JOBS_BIN, REPO, Stack, stack_secrets

DEFAULT_API_PORT = 8080
SHARED_AIRFLOW_ENV = REPO / "docker" / "airflow.env"   # settings this stack and docker-compose.yaml share
ADMIN_USER = "admin"
UI_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


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
        "AIRFLOW__LOGGING__REMOTE_BASE_LOG_FOLDER": f"s3://{bucket}/logs",   # remote logging: docker/airflow.env
        # Lineage of every task to a local file (compose writes it to the task logs; docs/airflow.md, "Lineage").
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "append": True,
                                                       "log_file_path": str(stack.lineage_events)}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_conn),
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws_conn),
        "ROSSMANN_BUCKET": bucket,
        "PATH": f"{JOBS_BIN}:{AIRFLOW_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        # The jobs' driver JVMs start from the class archive setup_env.sh built (rossmann_jobs/launch_settings.py).
        **({CLASS_ARCHIVE_ENV: str(archive)} if (archive := jobs_env_class_archive(JOBS_BIN.parent)).is_file() else {}),
    }


def write_admin_password(stack: Stack) -> str:
    password = stack_secrets(stack)["admin_password"]
    stack.airflow_home.mkdir(parents=True, exist_ok=True)
    fd = os.open(stack.passwords_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({ADMIN_USER: password}, handle)
    return password


def airflow_init(stack: Stack, env: dict[str, str]) -> None:
    """Create/upgrade the metadata database, the admin login and the Spark pool (and the lineage events' folder:
    the file transport does not create it)."""
    stack.airflow_home.mkdir(parents=True, exist_ok=True)
    stack.lineage_events.parent.mkdir(parents=True, exist_ok=True)
    write_admin_password(stack)
    subprocess.run([str(AIRFLOW_BIN / "airflow"), "db", "migrate"], env={**os.environ, **env}, check=True,
                   stdout=subprocess.DEVNULL)
    # A deployment's `rossmann-forecast bootstrap` (plugins/rossmann/bootstrap.py): here only the Spark pool the
    # DAG's spark-submit tasks share. Without the AIRFLOW_CONN_* variables, so that it leaves the connections where
    # the components read them, in their environment (`env`), and the stack's S3 keys out of the database.
    bootstrap_env = {key: value for key, value in {**os.environ, **env}.items() if not key.startswith("AIRFLOW_CONN_")}
    subprocess.run([str(AIRFLOW_BIN / "python"), "-m", "rossmann.bootstrap"], check=True, stdout=subprocess.DEVNULL,
                   env={**bootstrap_env, "PYTHONPATH": str(REPO / "plugins")})


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
