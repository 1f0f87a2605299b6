"""Alerts to the `rossmann_alerts` HTTP connection: a task that fails for good, and a forecast run that misses its
deadline (Airflow's deadline alerts, run by the triggerer).

The connection is any HTTP endpoint that takes a JSON POST (a Slack or Teams incoming webhook behind a small relay,
Opsgenie, PagerDuty Events, an internal alert router): `AIRFLOW_CONN_ROSSMANN_ALERTS='{"conn_type": "http",
"host": "alerts.internal", "schema": "https", "extra": {"Authorization": "Bearer ..."}}'`. Without the connection
nothing is sent and the task log says so. Retries do not alert; only the last try's failure does.
"""
from __future__ import annotations

import logging
import os
from datetime import timedelta
from typing import Any, Mapping

from airflow.providers.http.notifications.http import HttpNotifier

log = logging.getLogger(__name__)

ALERTS_CONN_ID = "rossmann_alerts"
# Seconds from a run's queueing to its end (success prunes the deadline). The daily run is queued when day D ends,
# the drop may take the sensor's 6 h to arrive, and a full-scale run takes about an hour on 2 cores: 8 h.
FORECAST_DEADLINE_ENV = "ROSSMANN_FORECAST_DEADLINE_S"
DEFAULT_FORECAST_DEADLINE_S = 8 * 3600
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


def forecast_deadline() -> timedelta:
    raw = os.environ.get(FORECAST_DEADLINE_ENV, str(DEFAULT_FORECAST_DEADLINE_S))
    if not raw.strip().isdigit() or int(raw) < 1:
        raise ValueError(f"{FORECAST_DEADLINE_ENV}={raw!r}: give the seconds a run may take from being queued")
    return timedelta(seconds=int(raw))


def deadline_message(context: Mapping[str, Any]) -> dict[str, Any] | None:
    """The alert for a run that missed its deadline; None for a backfill run (it queues behind the others by
    design, and the forecast it writes is for a past date)."""
    run = context.get("dag_run") or {}
    if run.get("run_type") == "backfill":
        return None
    return {"alert": "rossmann_forecast run missed its deadline", "dag_id": run.get("dag_id"),
            "run_id": run.get("dag_run_id") or run.get("run_id"), "run_type": run.get("run_type"),
            "logical_date": run.get("logical_date"), "state": run.get("state"),
            "deadline": str((context.get("deadline") or {}).get("deadline_time"))}


async def forecast_deadline_missed(context: Mapping[str, Any] | None = None, **_: Any) -> None:
    """The deadline alert's callback (AsyncCallback: the triggerer imports and awaits it)."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    message = deadline_message(context or {})
    if message is None:
        log.info("deadline missed by a backfill run: no alert")
        return
    try:
        await AlertWebhook(http_conn_id=ALERTS_CONN_ID, json=message).async_notify(dict(context or {}))
    except AirflowNotFoundException:
        log.info("no %r connection: deadline alert not sent (%s)", ALERTS_CONN_ID, message)
