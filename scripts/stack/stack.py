"""The embedded stack on one machine: a moto S3 server and Airflow on SQLite, all on loopback, state under var/.
Optionally, as production runs it: Airflow's metadata on a private PostgreSQL server and the jobs on a Spark
standalone cluster (a master and workers), both on loopback too.

Run as `rossmann-stack` (scripts/setup_env.sh installs the command into .venvs/airflow: scripts/stack/pyproject.toml)
or with the Airflow environment's Python (it needs only the standard library and boto3):

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
import shlex
import sys
from pathlib import Path

from rossmann_jobs.output_layout import configured_bucket
from stack_airflow import (  # noqa: F401  (the stack's API: tests and scripts use stack.<name>)
    ADMIN_USER,
    DEFAULT_API_PORT,
    SHARED_AIRFLOW_ENV,
    UI_COMPONENTS,
    airflow_env,
    airflow_init,
    aws_env,
    shared_airflow_settings,
    start_ui,
    stop_ui,
    write_admin_password,
)
from stack_postgres import (  # noqa: F401  (the stack's API: tests and scripts use stack.<name>)
    AIRFLOW_DB_ROLE,
    DEFAULT_POSTGRES_PORT,
    POSTGRES_BIN_GLOB,
    POSTGRES_OS_USER,
    as_postgres_user,
    postgres_bin_dir,
    postgres_database,
    postgres_root,
    run_psql,
    start_postgres,
    stop_postgres,
)
from stack_processes import (  # noqa: F401  (the stack's API: tests and scripts use stack.<name>)
    group_alive,
    pid_alive,
    reap,
    running_pid,
    start_process,
    stop_process,
    stop_processes,
    wait_http,
)
from stack_s3 import (  # noqa: F401  (the stack's API: tests and scripts use stack.<name>)
    DEFAULT_S3_PORT,
    create_bucket,
    fetch,
    s3_endpoint,
    start_s3,
)
from stack_spark import (  # noqa: F401  (the stack's API: tests and scripts use stack.<name>)
    DEFAULT_SPARK_PORT,
    EXECUTOR_ENV_ALIAS,
    running_spark_cluster,
    spark_cluster_conf,
    spark_cluster_status,
    spark_master_url,
    spark_worker_dir,
    start_spark_cluster,
    stop_spark_cluster,
)
from stack_state import (  # noqa: F401  (the stack's API: tests and scripts use stack.<name>)
    AIRFLOW_BIN,
    DEFAULT_BUCKET,
    JOBS_BIN,
    REPO,
    Stack,
    default_stack,
    free_port,
    stack_secrets,
)

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
    s3_start.add_argument("--bucket", default=configured_bucket())
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
    bucket = configured_bucket()

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
