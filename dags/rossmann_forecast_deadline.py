"""
### Rossmann forecast deadline

Every day at the deadline (`ROSSMANN_FORECAST_DEADLINE`, HH:MM UTC, default 06:00) `check_forecast_published`
reads `s3://<bucket>/forecast/latest.json` and fails when it does not hold the forecast as of the day before
(the `rossmann_forecast` run for D starts after D ends). A failure posts the "forecast late" alert to the
`rossmann_alerts` connection, like every task failure of `rossmann_forecast`; clear the task once the forecast
is published to turn the run green. No catchup: past deadlines are not checked again.
"""
from __future__ import annotations

from datetime import datetime, timezone

from airflow.sdk import CronTriggerTimetable, dag, task

from rossmann.alerts import forecast_late_alert
from rossmann.deadline import deadline_cron


@dag(
    dag_id="rossmann_forecast_deadline",
    schedule=CronTriggerTimetable(deadline_cron(), timezone="UTC"),
    start_date=datetime(2013, 1, 2, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "forecasting", "retries": 0, "on_failure_callback": [forecast_late_alert()]},
    tags=["rossmann", "forecast", "deadline"],
    doc_md=__doc__,
)
def rossmann_forecast_deadline():
    @task
    def check_forecast_published(logical_date=None) -> dict:
        """Fail (and alert) unless `forecast/latest.json` holds a forecast as of the day before the deadline."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook
        from airflow.sdk.exceptions import AirflowFailException

        from rossmann.deadline import due_as_of, lateness
        from rossmann.outputs import read_pointer
        from rossmann.uris import forecast_pointer_uri

        pointer_uri = forecast_pointer_uri()
        due = due_as_of(logical_date)
        pointer = read_pointer(S3Hook(aws_conn_id="aws_default"), pointer_uri)
        late = lateness(pointer, due, pointer_uri)
        if late:
            raise AirflowFailException(late)
        return {"due_as_of": due.isoformat(), "published_as_of": pointer["as_of"], "run_id": pointer["run_id"]}

    check_forecast_published()


rossmann_forecast_deadline()
