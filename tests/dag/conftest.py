"""Fixtures of the Airflow-side tests (helpers in stack_helpers.py, which also isolates AIRFLOW_HOME)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from installed_venv import InstalledVenv
from stack_helpers import FIRST_DATE, FIRST_RUN_CONF, REPO_ROOT, embedded, run_dag, start_stack


@pytest.fixture(scope="session")
def dag_test_stack(tmp_path_factory):
    """moto S3 + SQLite Airflow home for `airflow dags test` runs (no scheduler, so no SQLite lock contention)."""
    handle = start_stack(tmp_path_factory.mktemp("dag-test-stack"))
    yield handle
    embedded.stop_process(handle.state, "moto")


@pytest.fixture(scope="session")
def built_wheels(tmp_path_factory) -> Path:
    """`make dist`'s artifacts built once from the checkout (scripts/build_wheels.sh): both wheels and the jobs
    wheel as rossmann_jobs.zip, for the installed-wheel and the cluster tests."""
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "build_wheels.sh"), str(out)], check=True,
                   env={**os.environ, "PIP": str(Path(sys.executable).parent / "pip")})
    return out


@pytest.fixture(scope="session")
def installed(tmp_path_factory, built_wheels) -> InstalledVenv:
    """Both wheels installed into a new venv without the checkout: the installed-wheel checks, and the venv whose
    Airflow runs the cluster end to end's DAG run (one run proves both)."""
    return InstalledVenv.install(tmp_path_factory.mktemp("wheel-install"), built_wheels)


@pytest.fixture(scope="session")
def first_run(dag_test_stack):
    """The local-mode (local[2]) run of FIRST_DATE: many e2e assertions, and the reference of the cluster run."""
    return run_dag(dag_test_stack, FIRST_DATE, FIRST_RUN_CONF)


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """A private PostgreSQL server on 127.0.0.1 (Debian's binaries); tests create their own databases with
    `embedded.postgres_database(postgres_server, name)`. Its data lives under /tmp, not pytest's tmp dir: as root
    the server runs as the `postgres` user, who cannot enter root's 0700 pytest folders."""
    state = embedded.Stack(tmp_path_factory.mktemp("postgres-stack"))
    data_root = Path(tempfile.mkdtemp(prefix="rossmann-postgres-"))
    embedded.start_postgres(state, data_root=data_root, port=embedded.free_port())
    try:
        yield state
    finally:
        embedded.stop_postgres(state)
        shutil.rmtree(data_root, ignore_errors=True)
