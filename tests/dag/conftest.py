"""Fixtures of the Airflow-side tests (helpers in stack_helpers.py, which also isolates AIRFLOW_HOME)."""
from __future__ import annotations

import pytest
from stack_helpers import embedded, start_stack


@pytest.fixture(scope="session")
def dag_test_stack(tmp_path_factory):
    """moto S3 + SQLite Airflow home for `airflow dags test` runs (no scheduler, so no SQLite lock contention)."""
    handle = start_stack(tmp_path_factory.mktemp("dag-test-stack"))
    yield handle
    embedded.stop_process(handle.state, "moto")
