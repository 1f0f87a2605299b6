"""Alerts: one message to the `rossmann_alerts` connection when a task fails for good, the forecast is late, scores
drift or the naive fallback is published.

The connection's type picks the channel, each through its Airflow provider: `http` (a JSON POST to any endpoint: an
alert router, Opsgenie, PagerDuty Events), `slackwebhook` (a Slack incoming webhook, the Slack provider's
SlackWebhookNotifier), `smtp` (a mail, the SMTP provider's SmtpNotifier; recipients in the extra `to`) or `apprise`
(any Apprise URL, e.g. Teams, Discord, ntfy; the Apprise provider's connection). Without the connection nothing is
sent and the task log says so. Retries do not alert; only the last try's failure does. A forecast drift alert does
not fail its task: the scores are still published.

What leaves is the reason and the log link, never data (alert_reason): the reason stops before the example rows a
job's failure quotes after "e.g." (rossmann_jobs.job_protocol.EXAMPLES_MARKER); any other quoted text (a file's
header, the bytes around a corruption) is replaced by '…' unless it names a file or a column of the drop; and a
failed spark-submit is reported by its exit status alone, without the command and the output tail the Spark provider
appends. What was left out stays in the task log, behind Airflow's access control. On every channel a send has a
timeout, and a transient failure (refused connection, timeout, 429 or 5xx, a temporary SMTP refusal) is retried a
bounded number of times (ATTEMPTS in all) before the alert gives up and raises; the providers' own retries are off,
so that the bound is this one.
"""
from __future__ import annotations

import html
import json
import re
import time
from typing import Any

from airflow.sdk import BaseNotifier

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


class Undelivered(Exception):
    """One send that did not deliver; `transient` says whether the same send may succeed on a retry."""

    def __init__(self, text: str, transient: bool):
        super().__init__(text)
        self.transient = transient


def message_text(message: dict[str, Any]) -> tuple[str, str]:
    """The title and the plain-text body (one `key: value` line per field) for the channels that carry text."""
    title = str(message.get("alert", "rossmann alert"))
    lines = [f"{key}: {value if isinstance(value, str) else json.dumps(value, sort_keys=True)}"
             for key, value in message.items() if key != "alert"]
    return title, "\n".join(lines)


def send_http(conn_id: str, message: dict[str, Any], context: Any) -> None:
    import requests
    from airflow.providers.http.hooks.http import HttpHook

    try:
        response = HttpHook(method="POST", http_conn_id=conn_id).run(
            json=message, extra_options={"timeout": TIMEOUT_S, "check_response": False})
    except (requests.ConnectionError, requests.Timeout) as failure:
        raise Undelivered(str(failure), transient=True) from failure
    if not response.ok:
        error = requests.HTTPError(f"alert endpoint answered {response.status_code} {response.reason}",
                                   response=response)
        raise Undelivered(str(error), transient=retryable(response.status_code)) from error


_SLACK_STATUS = re.compile(r"Status Code: (\d+)")


def send_slack_webhook(conn_id: str, message: dict[str, Any], context: Any) -> None:
    from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier
    from airflow.sdk.exceptions import AirflowException

    title, body = message_text(message)
    notifier = SlackWebhookNotifier(slack_webhook_conn_id=conn_id, text=f"*{title}*\n{body}",
                                    timeout=int(sum(TIMEOUT_S)), retry_handlers=[])
    try:
        notifier.notify(context)
    except OSError as failure:          # refused, reset or timed out (urllib under slack_sdk)
        raise Undelivered(f"Slack webhook not reached: {failure}", transient=True) from failure
    except AirflowException as failure:   # the provider's non-200 answer, its status in the text
        status = _SLACK_STATUS.search(str(failure))
        raise Undelivered(f"Slack webhook answered {status[1] if status else '?'}",
                          transient=bool(status) and retryable(int(status[1]))) from failure


def _one_try_smtp_hook(conn_id: str):
    from airflow.providers.smtp.hooks.smtp import SmtpHook

    class OneTrySmtpHook(SmtpHook):
        """The SMTP provider's hook with its own retries off and the alerts' timeout: the bound is ATTEMPTS."""

        smtp_retry_limit = 0

        @property
        def timeout(self) -> int:
            return int(sum(TIMEOUT_S))

    return OneTrySmtpHook(smtp_conn_id=conn_id)


def send_smtp(conn_id: str, message: dict[str, Any], context: Any) -> None:
    import smtplib

    from airflow.providers.smtp.notifications.smtp import SmtpNotifier
    from airflow.sdk import BaseHook

    recipients = BaseHook.get_connection(conn_id).extra_dejson.get("to")
    if not recipients:
        raise Undelivered(f"the smtp connection {conn_id!r} names no recipients: set its extra \"to\" "
                          "(an address or a list)", transient=False)
    title, body = message_text(message)
    notifier = SmtpNotifier(smtp_conn_id=conn_id, to=recipients, subject=title,
                            html_content=f"<pre>{html.escape(body)}</pre>")
    notifier.hook = _one_try_smtp_hook(conn_id)
    try:
        notifier.notify(context)
    except (smtplib.SMTPAuthenticationError, smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused) as failure:
        raise Undelivered(f"mail server refused the alert: {failure}", transient=False) from failure
    except smtplib.SMTPResponseException as failure:   # 4xx: try again later; 5xx: refused for good
        raise Undelivered(f"mail server answered {failure.smtp_code}", transient=failure.smtp_code < 500) from failure
    except (OSError, smtplib.SMTPException) as failure:
        raise Undelivered(f"mail server not reached: {failure}", transient=True) from failure


def send_apprise(conn_id: str, message: dict[str, Any], context: Any) -> None:
    # The Apprise provider's notifier drops Apprise's delivery result; its hook reads the connection's URLs and the
    # result is checked here. Each URL's own timeouts apply (Apprise's `cto`/`rto` URL options, 4 s by default).
    import apprise
    from airflow.providers.apprise.hooks.apprise import AppriseHook
    from airflow.sdk import BaseHook

    targets = apprise.Apprise()
    AppriseHook(apprise_conn_id=conn_id).set_config_from_conn(BaseHook.get_connection(conn_id), targets)
    title, body = message_text(message)
    if not targets.notify(body=body, title=title):
        raise Undelivered("Apprise delivered the alert to none of the connection's URLs (the task log has "
                          "Apprise's reason)", transient=True)


# conn_type -> how one send goes out
CHANNELS = {"http": send_http, "slackwebhook": send_slack_webhook, "smtp": send_smtp, "apprise": send_apprise}
# conn_type -> the rossmann-forecast extra that installs its provider (packaging/rossmann-forecast/pyproject.toml)
CHANNEL_EXTRAS = {"slackwebhook": "slack", "smtp": "smtp", "apprise": "apprise"}


class Alert(BaseNotifier):
    """One alert message (a template rendered with the task's context) to the `rossmann_alerts` connection, by the
    channel its type names; skipped (and said so) when the connection is not configured."""

    template_fields = ("message",)

    def __init__(self, message: dict[str, Any], conn_id: str = ALERTS_CONN_ID):
        super().__init__()
        self.message = message
        self.conn_id = conn_id

    def notify(self, context: Any) -> None:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        message = dict(self.message)
        if "reason" in message:
            message["reason"] = alert_reason(message["reason"])
        try:
            conn_type = BaseHook.get_connection(self.conn_id).conn_type
        except AirflowNotFoundException:
            self.log.info("no %r connection: alert not sent (%s)", self.conn_id, message)
            return
        send = CHANNELS.get(conn_type)
        if send is None:
            raise ValueError(f"connection {self.conn_id!r} has type {conn_type!r}; an alert goes to one of "
                             f"{sorted(CHANNELS)}")
        for attempt in range(1, ATTEMPTS + 1):
            try:
                send(self.conn_id, message, context)
                return
            except ModuleNotFoundError as missing:
                raise RuntimeError(f"connection {self.conn_id!r} has type {conn_type!r}, whose provider is not "
                                   f"installed ({missing.name}): pip install "
                                   f"'rossmann-forecast[{CHANNEL_EXTRAS.get(conn_type, conn_type)}]'") from missing
            except Undelivered as failure:
                if not failure.transient or attempt == ATTEMPTS:
                    raise
                self.log.warning("alert to %r (%s) not delivered (try %d of %d: %s); retrying", self.conn_id,
                                 conn_type, attempt, ATTEMPTS, failure)
            time.sleep(RETRY_DELAY_S * 2 ** (attempt - 1))


def task_failure_alert() -> Alert:
    return Alert(dict(TASK_FAILED_MESSAGE))


def forecast_late_alert() -> Alert:
    return Alert(dict(FORECAST_LATE_MESSAGE))


def forecast_drift_alert(details: dict[str, Any]) -> Alert:
    """The drift alert carrying details (plain JSON values); its notify(context) posts it as it is."""
    return Alert({**FORECAST_DRIFT_MESSAGE, **details})


def forecast_fallback_alert(details: dict[str, Any]) -> Alert:
    """The fallback alert carrying details (plain JSON values); its notify(context) posts it as it is."""
    return Alert({**FORECAST_FALLBACK_MESSAGE, **details})
