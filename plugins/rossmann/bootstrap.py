"""`rossmann-forecast bootstrap`: what a deployment needs in Airflow's metadata database, idempotently, said aloud.

Run it once per deployment (and again after changing a setting) where `airflow db migrate` runs, with the
deployment's environment:

* the Spark pool `rossmann_spark` (slots: `ROSSMANN_SPARK_POOL_SLOTS`, default 1; rossmann/pools.py);
* the DAG's connections, from Airflow's own `AIRFLOW_CONN_<ID>` variables (JSON or URI): `spark_default`,
  `aws_default`, the jobs' S3 identity `$ROSSMANN_JOBS_AWS_CONN_ID` and `rossmann_alerts`. A connection whose
  variable is not set is left as it is in the database (the DAG can also read it from a secrets backend or the
  components' environment); one that is set is created or updated, so the components no longer need the variable;
* the Variables `rossmann_jobs_root` and `rossmann_py_files`, from `ROSSMANN_JOBS_ROOT` and `ROSSMANN_PY_FILES`
  when set (else left as they are: the DAG has defaults).

It prints one line per item (created, updated, unchanged, or why skipped), never a password or an extra: those
may hold credentials. Last, the DAG bundle setting that points Airflow at the installed DAG files.
"""
from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import Mapping

import rossmann
from rossmann.alerts import ALERTS_CONN_ID
from rossmann.pools import ensure_spark_pool
from rossmann.spark_submit import DEFAULT_JOBS_AWS_CONN_ID, JOBS_AWS_CONN_ENV

SPARK_CONN_ID = "spark_default"   # the DAG's spark-submit tasks (dags/rossmann_forecast.py)
BUNDLE_NAME = "rossmann"
BUNDLE_CLASS = "airflow.dag_processing.bundles.local.LocalDagBundle"
# Variable -> the environment variable that sets it (the DAG's templates read the Variables, with defaults).
VARIABLES = {"rossmann_jobs_root": "ROSSMANN_JOBS_ROOT", "rossmann_py_files": "ROSSMANN_PY_FILES"}
CONNECTION_FIELDS = ("conn_type", "description", "host", "schema", "login", "password", "port", "extra")


def dags_folder() -> Path:
    """The DAG files: rossmann/dags/ in the installed wheel, else dags/ of the checkout beside plugins/."""
    package = Path(rossmann.__file__).resolve().parent
    installed = package / "dags"
    return installed if installed.is_dir() else package.parents[1] / "dags"


def bundle_config(path: Path | None = None) -> list[dict]:
    """The value of `[dag_processor] dag_bundle_config_list` that names the installed DAG files as one bundle."""
    return [{"name": BUNDLE_NAME, "classpath": BUNDLE_CLASS, "kwargs": {"path": str(path or dags_folder())}}]


def connection_ids(environ: Mapping[str, str] = os.environ) -> list[str]:
    jobs = environ.get(JOBS_AWS_CONN_ENV) or DEFAULT_JOBS_AWS_CONN_ID
    return list(dict.fromkeys([SPARK_CONN_ID, DEFAULT_JOBS_AWS_CONN_ID, jobs, ALERTS_CONN_ID]))


def _fields(connection) -> tuple:
    return tuple(getattr(connection, name) for name in CONNECTION_FIELDS)


def ensure_connection(conn_id: str, environ: Mapping[str, str] = os.environ) -> str:
    """Create or update `conn_id` in the database from `AIRFLOW_CONN_<ID>`; says what it did (no secret)."""
    from airflow.models.connection import Connection
    from airflow.secrets.environment_variables import CONN_ENV_PREFIX, EnvironmentVariablesBackend
    from airflow.utils.session import create_session
    from sqlalchemy import select

    env_name = f"{CONN_ENV_PREFIX}{conn_id.upper()}"
    value = environ.get(env_name)
    if not value:
        return f"connection {conn_id}: {env_name} is not set, left as it is"
    wanted = EnvironmentVariablesBackend().deserialize_connection(conn_id, value)
    with create_session() as session:
        existing = session.scalar(select(Connection).where(Connection.conn_id == conn_id))
        if existing is None:
            session.add(wanted)
            action = "created"
        elif _fields(existing) == _fields(wanted):
            action = "unchanged"
        else:
            for name in CONNECTION_FIELDS:
                setattr(existing, name, getattr(wanted, name))
            action = "updated"
    from airflow.models.crypto import get_fernet

    # Airflow stores passwords and extras in clear text without a Fernet key; say so rather than hide it.
    clear = action != "unchanged" and (wanted.password or wanted.extra) and not get_fernet().is_encrypted
    warning = " (stored unencrypted: [core] fernet_key is not set)" if clear else ""
    return f"connection {conn_id} ({wanted.conn_type}): {action} from {env_name}{warning}"


def ensure_variable(key: str, environ: Mapping[str, str] = os.environ) -> str:
    """Set Variable `key` from its environment variable; says what it did."""
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import select

    env_name = VARIABLES[key]
    if env_name not in environ:
        return f"variable {key}: {env_name} is not set, left as it is (the DAG's default applies when unset)"
    value = environ[env_name]
    warning = py_files_warning(value) if key == "rossmann_py_files" else ""
    with create_session() as session:
        existing = session.scalar(select(Variable).where(Variable.key == key))
        if existing is not None and existing.val == value:
            return f"variable {key} = {value!r}: unchanged{warning}"
        Variable.set(key, value, description=f"set by rossmann-forecast bootstrap from {env_name}", session=session)
    return f"variable {key} = {value!r}: {'created' if existing is None else 'updated'} from {env_name}{warning}"


def py_files_warning(py_files: str) -> str:
    """Spark puts a --py-files .zip, .egg or .jar on the executors' Python path, a .whl only on the driver's: the
    jobs would then import rossmann_jobs on executors only where it is installed (docs/deploy.md, option 2)."""
    wheels = [entry.strip() for entry in py_files.split(",") if entry.strip().lower().endswith(".whl")]
    if not wheels:
        return ""
    return (f" (warning: executors do not import a .whl shipped with --py-files: {', '.join(wheels)}; ship the "
            "same file named .zip, as `make dist` writes rossmann_jobs.zip)")


def bootstrap(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Every step, in order; returns the lines it printed."""
    steps = [partial(ensure_spark_pool, environ),
             *(partial(ensure_connection, conn_id, environ) for conn_id in connection_ids(environ)),
             *(partial(ensure_variable, key, environ) for key in VARIABLES)]
    lines = []
    for step in steps:   # printed as they happen: a failing step shows what was done before it
        lines.append(step())
        print(lines[-1], flush=True)
    config = json.dumps(bundle_config())
    lines.append(f"DAG bundle: AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST='{config}'")
    print(lines[-1])
    return lines


if __name__ == "__main__":
    bootstrap()
