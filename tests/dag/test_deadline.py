"""The forecast deadline: at HH:MM on D+1 the published forecast must be as of D, else the deadline DAG fails and
the "forecast late" alert reaches the rossmann_alerts connection (a webhook sink here)."""
from __future__ import annotations

import json
import subprocess
from datetime import date, datetime, timedelta, timezone

import pytest

from stack_helpers import REPO_ROOT, AlertSink

DEADLINE_DAG_ID = "rossmann_forecast_deadline"


def test_the_deadline_is_a_configurable_time_of_day():
    from rossmann.deadline import deadline_cron, deadline_time

    assert deadline_cron("06:00") == "0 6 * * *" and deadline_cron("23:45") == "45 23 * * *"
    assert deadline_time("7:05".zfill(5)).hour == 7
    with pytest.raises(ValueError, match="ROSSMANN_FORECAST_DEADLINE='six' is not a time of day"):
        deadline_time("six")


def test_the_forecast_due_at_a_deadline_is_the_day_before():
    from rossmann.deadline import due_as_of

    assert due_as_of(datetime(2015, 8, 1, 6, 0, tzinfo=timezone.utc)) == date(2015, 7, 31)
    assert due_as_of(datetime(2015, 8, 1, 0, 30, tzinfo=timezone(timedelta(hours=2)))) == date(2015, 7, 30)


@pytest.mark.parametrize("published, late", [(None, True), ("2015-07-30", True), ("2015-07-31", False),
                                             ("2015-08-01", False)])
def test_a_forecast_is_late_unless_the_pointer_holds_the_due_date_or_later(published, late):
    from rossmann.deadline import lateness

    pointer = None if published is None else {"as_of": published, "run_id": "r", "published_at": "t"}
    reason = lateness(pointer, date(2015, 7, 31), "s3://b/forecast/latest.json")
    assert (reason is not None) == late
    if late:
        assert "the forecast as of 2015-07-31" in reason and "s3://b/forecast/latest.json" in reason


def test_the_deadline_dag_runs_daily_at_the_deadline_and_alerts_on_failure():
    from airflow.dag_processing.dagbag import DagBag

    from rossmann.alerts import ALERTS_CONN_ID, Alert

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "rossmann_forecast_deadline.py"))
    assert bag.import_errors == {}
    dag = bag.dags[DEADLINE_DAG_ID]
    assert dag.timetable.expression == "0 6 * * *" and dag.catchup is False
    [check] = dag.tasks
    assert check.retries == 0, "a late forecast stays late on a retry seconds later"
    notifiers = [callback for callback in check.on_failure_callback if isinstance(callback, Alert)]
    assert [(n.conn_id, n.message["alert"]) for n in notifiers] == [(ALERTS_CONN_ID, "rossmann forecast late")]


def run_deadline(stack, checked_at: datetime, sink: AlertSink) -> dict:
    result = subprocess.run(["airflow", "dags", "test", DEADLINE_DAG_ID, checked_at.isoformat()],
                            env={**stack.process_env(), **sink.connection_env}, cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=300)
    return {"output": result.stdout + result.stderr}


@pytest.mark.slow
def test_the_deadline_passes_on_the_published_forecast_and_alerts_a_day_later(dag_test_stack, first_run):
    """Against the forecast the first e2e run really published: its deadline passes silently; the next day's
    deadline, with no newer forecast, fails and posts one "forecast late" alert naming the missing date."""
    published = date.fromisoformat(dag_test_stack.read_json(
        first_run["summary"]["xcom"]["plan_run"]["forecast_pointer"])["as_of"])
    sink = AlertSink()
    try:
        on_time = published + timedelta(days=1)
        passed = run_deadline(dag_test_stack, datetime(on_time.year, on_time.month, on_time.day, 6,
                                                       tzinfo=timezone.utc), sink)
        assert "check_forecast_published" in passed["output"]
        assert sink.received == [], passed["output"][-4000:]
        late = on_time + timedelta(days=1)
        failed = run_deadline(dag_test_stack, datetime(late.year, late.month, late.day, 6, tzinfo=timezone.utc),
                              sink)
        assert len(sink.received) == 1, failed["output"][-4000:]
    finally:
        sink.stop()
    alert = sink.received[0]
    assert alert["alert"] == "rossmann forecast late" and alert["dag_id"] == DEADLINE_DAG_ID
    assert f"the forecast as of {on_time} is not published" in alert["reason"]
    assert f"still holds the forecast as of {published}" in alert["reason"]
    print(json.dumps(alert, indent=1))
