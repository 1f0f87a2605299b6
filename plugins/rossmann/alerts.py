"""Alerts: one JSON message to the `rossmann_alerts` HTTP connection when a task fails for good or scores drift.

The connection is any HTTP endpoint that takes a JSON POST (a Slack or Teams incoming webhook behind a small relay,
Opsgenie, PagerDuty Events, an internal alert router): `AIRFLOW_CONN_ROSSMANN_ALERTS='{"conn_type": "http",
"host": "alerts.internal", "schema": "https", "extra": {"Authorization": "Bearer ..."}}'`. Without the connection
nothing is sent and the task log says so. Retries do not alert; only the last try's failure does. A forecast drift
alert does not fail its task: the scores are still published.

What leaves through the webhook is the reason and the log link, never data (alert_reason): the reason stops before
the example rows a job's failure quotes after "e.g." (rossmann_jobs.job_protocol.EXAMPLES_MARKER); any other quoted
text (a file's header, the bytes around a corruption) is replaced by '…' unless it names a file or a column of
the drop; and a failed spark-submit is reported by its exit status alone, without the command and the output tail
the Spark provider appends. What was left out stays in the task log, behind Airflow's access control. Each POST
has a timeout, and a refused connection, a timeout, a 429 or a 5xx is retried a bounded number of times before
the notifier gives up (and raises).
"""
from __future__ import annotations

import re
import time
from typing import Any

from airflow.providers.http.notifications.http import HttpNotifier

from rossmann_jobs.job_protocol import EXAMPLES_MARKER

ALERTS_CONN_ID = "rossmann_alerts"
TIMEOUT_S = (5.0, 10.0)          # connect, read: a hung endpoint must not hold the task's callback
ATTEMPTS, RETRY_DELAY_S = 3, 1.0  # delays 1 s, 2 s: a short outage is ridden out, a long one gives up
MAX_REASON_CHARS = 500
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


# publish_forecast: no model may forecast the date, so the naive seasonal baseline is the published forecast (the
# run still succeeds: consumers get a forecast). Plain values: the run, the date, why, the report's URI.
FORECAST_FALLBACK_MESSAGE = {"alert": "rossmann forecast fallback"}


# The Spark provider's error when spark-submit fails: the masked command, the exit status, then its output's tail.
_SPARK_SUBMIT_FAILED = re.compile(r"^Cannot execute: .*?\. Error code is: (\d+)\.", re.DOTALL)
# A quoted literal as repr writes one, bytes too (an apostrophe inside a word opens none).
_QUOTED = re.compile(r"(?<!\w)b?'((?:[^'\\]|\\.)*)'(?!\w)" + r'|(?<!\w)b?"((?:[^"\\]|\\.)*)"(?!\w)')
REDACTED = "'…'"


def drop_names() -> frozenset[str]:
    """The names a reason may quote: the raw drop's files and columns (not data)."""
    from rossmann_jobs.features.raw_schemas import RAW_FILES

    return frozenset(RAW_FILES) | {name for raw in RAW_FILES.values() for name in raw.column_names}


def alert_reason(text: Any) -> str:
    """A failure reason fit for the webhook: no example rows, no quoted text but the drop's file and column names,
    no spark-submit output, at most MAX_REASON_CHARS; what was left out is in the task log."""
    failed_submit = _SPARK_SUBMIT_FAILED.match(str(text))
    if failed_submit:
        return (f"spark-submit exited with status {failed_submit[1]} [the command and its output: see the task "
                "log]")
    reason = " ".join(str(text).split())
    head, marker, _ = reason.partition(EXAMPLES_MARKER)
    names = drop_names()
    redacted = _QUOTED.sub(lambda quoted: quoted[0] if (quoted[1] or quoted[2]) in names else REDACTED, head)
    cut = bool(marker) or redacted != head or len(redacted) > MAX_REASON_CHARS
    redacted = redacted.rstrip(" ,;:(")[:MAX_REASON_CHARS]
    return f"{redacted} [examples and details: see the task log]" if cut else redacted


def retryable(status: int) -> bool:
    return status == 429 or status >= 500


class AlertWebhook(HttpNotifier):
    """HttpNotifier that skips (and says so) when its connection is not configured, sends the reason without data
    rows, and posts with a timeout and a bounded retry."""

    def notify(self, context: Any) -> None:
        import requests
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        if isinstance(self.json, dict) and "reason" in self.json:
            self.json = {**self.json, "reason": alert_reason(self.json["reason"])}
        try:
            BaseHook.get_connection(self.http_conn_id)
        except AirflowNotFoundException:
            self.log.info("no %r connection: alert not sent (%s)", self.http_conn_id, self.json)
            return
        options = {**self.extra_options, "timeout": TIMEOUT_S, "check_response": False}
        for attempt in range(1, ATTEMPTS + 1):
            try:
                response = self.hook.run(endpoint=self.endpoint, data=self.data, headers=self.headers,
                                         extra_options=options, json=self.json)
            except (requests.ConnectionError, requests.Timeout) as failure:
                error: Exception = failure
            else:
                if response.ok:
                    return
                error = requests.HTTPError(f"alert endpoint answered {response.status_code} {response.reason}",
                                           response=response)
                if not retryable(response.status_code):   # a 4xx: the same request would be refused again
                    raise error
            if attempt == ATTEMPTS:
                raise error
            self.log.warning("alert to %r not delivered (try %d of %d: %s); retrying", self.http_conn_id, attempt,
                             ATTEMPTS, error)
            time.sleep(RETRY_DELAY_S * 2 ** (attempt - 1))


def task_failure_alert() -> AlertWebhook:
    return AlertWebhook(http_conn_id=ALERTS_CONN_ID, json=dict(TASK_FAILED_MESSAGE))


def forecast_late_alert() -> AlertWebhook:
    return AlertWebhook(http_conn_id=ALERTS_CONN_ID, json=dict(FORECAST_LATE_MESSAGE))


def forecast_drift_alert(details: dict[str, Any]) -> AlertWebhook:
    """The drift alert carrying details (plain JSON values); its notify(context) posts it as it is."""
    return AlertWebhook(http_conn_id=ALERTS_CONN_ID, json={**FORECAST_DRIFT_MESSAGE, **details})


def forecast_fallback_alert(details: dict[str, Any]) -> AlertWebhook:
    """The fallback alert carrying details (plain JSON values); its notify(context) posts it as it is."""
    return AlertWebhook(http_conn_id=ALERTS_CONN_ID, json={**FORECAST_FALLBACK_MESSAGE, **details})
