"""With no raw drop landed, the sensor fails the run clearly once its (per-run) timeout has passed."""
from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.slow

NO_DATA_DATE = "2015-05-01"


def test_missing_drop_fails_the_sensor_after_its_timeout(dag_test_stack):
    started = time.monotonic()
    # Reschedule mode: `airflow dags test` runs a deferred trigger inline and ignores its timeout, so the deferrable
    # path's timeout is covered by test_plugins (resume_execution) and its wait by test_airflow_ui.
    result = dag_test_stack.dags_test(NO_DATA_DATE, {"raw_drop_timeout_s": 15}, timeout_s=600,
                                      extra_env={"AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "False"})
    elapsed = time.monotonic() - started
    summary = dag_test_stack.run_summary(NO_DATA_DATE)
    tasks = summary["tasks"]

    assert "failed" in summary["state"]
    assert "success" in tasks["plan_run"]["state"]
    assert "failed" in tasks["wait_for_raw_drop"]["state"]
    assert tasks["wait_for_raw_drop"]["try_number"] == 1, "a sensor timeout must not be retried"
    assert all("upstream_failed" in tasks[task]["state"] for task in
               ("prepare_features", "train_model", "quality_gate", "predict", "publish_forecast"))
    marker = f"s3://{dag_test_stack.bucket}/raw/{NO_DATA_DATE}/_SUCCESS"
    output = result.stdout + result.stderr + dag_test_stack.task_logs()
    assert f"No raw data drop arrived: {marker} did not appear within 15 s" in output
    assert "rossmann_jobs.synth land" in output  # tells the operator how to fix it
    assert elapsed >= 15
    assert output.count(f"Poking for key : {marker}") >= 2  # it really waited, poking repeatedly
