"""A drop with a broken file fails prepare once, with the job's own reason as the task's failure: bad input is
deterministic, so the operator does not retry it (exit status 2 -> AirflowFailException). The failure alert reaches a
webhook sink through the rossmann_alerts connection."""
from __future__ import annotations

import pytest

from stack_helpers import AlertSink

pytestmark = pytest.mark.slow

BAD_DROP_DATE = "2015-05-02"


@pytest.fixture()
def alert_sink():
    sink = AlertSink()
    yield sink
    sink.stop()


def test_bad_drop_fails_prepare_once_with_a_reason_that_names_the_file(dag_test_stack, alert_sink):
    stack = dag_test_stack
    alerts = alert_sink.received
    stack.land(BAD_DROP_DATE, BAD_DROP_DATE)
    key = f"raw/{BAD_DROP_DATE}/store_states.csv"
    text = stack.read_bytes(f"s3://{stack.bucket}/{key}").decode()
    stack.s3().put_object(Bucket=stack.bucket, Key=key, Body=text.replace(",", ";").encode())

    result = stack.dags_test(BAD_DROP_DATE, {}, timeout_s=900, extra_env=alert_sink.connection_env)
    summary = stack.run_summary(BAD_DROP_DATE)
    tasks = summary["tasks"]
    assert "failed" in summary["state"]
    assert "failed" in tasks["prepare_features"]["state"]
    assert tasks["prepare_features"]["try_number"] == 1, "bad input must not be retried"
    assert all("upstream_failed" in tasks[task]["state"] for task in ("train_model", "predict", "publish_forecast"))
    output = result.stdout + result.stderr
    # The task's failure is the job's own line (not the source line of the raise, which the traceback shows too).
    reasons = [line for line in output.splitlines() if "(bad input: not retried" in line and "prepare failed: " in line]
    assert reasons, output[-6000:]
    assert "store_states.csv: wrong delimiter" in reasons[0]
    assert "up_for_retry" not in tasks["prepare_features"]["state"]
    # One alert, for the task that failed, carrying the same reason.
    assert [alert["task_id"] for alert in alerts] == ["prepare_features"], alerts
    assert alerts[0]["as_of"] == BAD_DROP_DATE and alerts[0]["try_number"] == "1"
    assert "prepare failed: " in alerts[0]["reason"] and "store_states.csv: wrong delimiter" in alerts[0]["reason"]
