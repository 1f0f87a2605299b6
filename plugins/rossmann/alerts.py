"""Alerts: one JSON message to the `rossmann_alerts` HTTP connection when a task fails for good or scores drift.

The connection is any HTTP endpoint that takes a JSON POST (a Slack or Teams incoming webhook behind a small relay,
Opsgenie, PagerDuty Events, an internal alert router): `AIRFLOW_CONN_ROSSMANN_ALERTS='{"conn_type": "http",
"host": "alerts.internal", "schema": "https", "extra": {"Authorization": "Bearer ..."}}'`. Without the connection
nothing is sent and the task log says so. Retries do not alert; only the last try's failure does. A forecast drift
alert does not fail its task: the scores are still published.
"""
from __future__ import annotations

from typing import Any

from airflow.providers.http.notifications.http import HttpNotifier

ALERTS_CONN_ID = "rossmann_alerts"
# Rendered with the failed task's context; `exception` is the failure reason (for a Spark job with bad input, the
# job's own "<job> failed: ..." line).
TASK_FAILED_MESSAGE = {
    "alert": "rossmann_forecast task failed",
    "dag_id": "{{ dag.dag_id }}",
    "run_id": "{{ run_id }}",
    "as_of": "{{ ds }}",
    "task_id": "{{ ti.task_id }}",
    "try_number": "{{ ti.try_number }}",
    "reason": "{{ exception }}",
    "log_url": "{{ ti.log_url }}",
}

# The deadline DAG's failure: the forecast due at the deadline is not published (rossmann/deadline.py).
FORECAST_LATE_MESSAGE = {
    "alert": "rossmann forecast late",
    "dag_id": "{{ dag.dag_id }}",
    "run_id": "{{ run_id }}",
    "deadline": "{{ logical_date.isoformat() }}",
    "reason": "{{ exception }}",
    "log_url": "{{ ti.log_url }}",
}


# publish_scores: the last days' scores show a biased forecast or one that loses to the naive baseline. The task
# adds plain values (no template): the run, the scoring date, the numbers checked and one sentence per failed check.
FORECAST_DRIFT_MESSAGE = {"alert": "rossmann forecast drift"}


class AlertWebhook(HttpNotifier):
    """HttpNotifier that skips (and says so) when its connection is not configured, instead of failing."""

    def notify(self, context: Any) -> None:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            BaseHook.get_connection(self.http_conn_id)
        except AirflowNotFoundException:
            self.log.info("no %r connection: alert not sent (%s)", self.http_conn_id, self.json)
            return
        super().notify(context)


def task_failure_alert() -> AlertWebhook:
    return AlertWebhook(http_conn_id=ALERTS_CONN_ID, json=dict(TASK_FAILED_MESSAGE))


def forecast_late_alert() -> AlertWebhook:
    return AlertWebhook(http_conn_id=ALERTS_CONN_ID, json=dict(FORECAST_LATE_MESSAGE))


def forecast_drift_alert(details: dict[str, Any]) -> AlertWebhook:
    """The drift alert carrying details (plain JSON values); its notify(context) posts it as it is."""
    return AlertWebhook(http_conn_id=ALERTS_CONN_ID, json={**FORECAST_DRIFT_MESSAGE, **details})
