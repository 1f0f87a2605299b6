"""Alerts by the `rossmann_alerts` connection's type, through the providers' notifiers: a Slack incoming webhook, a
mail server and an Apprise URL, each a local sink here. On every channel: the reason without the example rows and
the log link arrive; a transient failure is retried ATTEMPTS times in all, a permanent one is not retried."""
from __future__ import annotations

import email
import json
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rossmann import alerts
from test_side_channels import REASON, failure_context


class HttpSink:
    """A local endpoint that answers each POST with the next of `statuses` (then `ok_status`), or sleeps first."""

    def __init__(self, statuses=(), ok_status: int = 200, delay_s: float = 0.0):
        received = self.received = []
        answers = list(statuses)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):   # noqa: N802 (http.server's naming)
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                time.sleep(delay_s)
                status = answers.pop(0) if answers else ok_status
                body = b"ok" if status == 200 else b"no_service"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


class SmtpSink:
    """A local mail server speaking enough SMTP for smtplib: it keeps each accepted mail; `greetings` answers the
    next connections (e.g. 421: busy, try later), `rcpt_code` answers every RCPT TO."""

    def __init__(self, greetings=(), rcpt_code: int = 250):
        mails = self.mails = []
        self.connections = 0
        greets = list(greetings)
        sink = self

        class Handler(socketserver.StreamRequestHandler):
            def reply(self, line: str) -> None:
                self.wfile.write(f"{line}\r\n".encode())

            def handle(self):
                sink.connections += 1
                greeting = greets.pop(0) if greets else 220
                self.reply(f"{greeting} sink ESMTP" if greeting == 220 else f"{greeting} sink busy")
                if greeting != 220:
                    return
                mail = {"rcpt": [], "data": ""}
                while line := self.rfile.readline().decode():
                    verb = line.split(" ", 1)[0].split(":", 1)[0].strip().upper()
                    if verb in ("EHLO", "HELO"):
                        self.reply("250 sink")
                    elif verb == "MAIL":
                        self.reply("250 ok")
                    elif verb == "RCPT":
                        mail["rcpt"].append(line.split(":", 1)[1].strip())
                        self.reply(f"{rcpt_code} {'ok' if rcpt_code == 250 else 'no such user'}")
                    elif verb == "DATA":
                        self.reply("354 go on")
                        lines = []
                        while (data := self.rfile.readline().decode()) not in (".\r\n", ""):
                            lines.append(data)
                        mail["data"] = "".join(lines)
                        mails.append(mail)
                        mail = {"rcpt": [], "data": ""}
                        self.reply("250 queued")
                    elif verb == "QUIT":
                        self.reply("221 bye")
                        return
                    else:
                        self.reply("250 ok")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


@pytest.fixture()
def quick_retries(monkeypatch):
    monkeypatch.setattr(alerts, "RETRY_DELAY_S", 0.01)


def connect(monkeypatch, connection: dict) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ROSSMANN_ALERTS", json.dumps(connection))


def slack_connection(sink: HttpSink) -> dict:
    return {"conn_type": "slackwebhook", "password": f"{sink.url}/services/T000/B000/XXXX"}


def assert_no_rows(text: str) -> None:
    assert "4711" in REASON and "4711" not in text and "2015-08-03" not in text


def test_a_slack_webhook_connection_posts_the_reason_and_log_link_through_the_slack_notifier(monkeypatch):
    sink = HttpSink()
    connect(monkeypatch, slack_connection(sink))
    try:
        alerts.task_failure_alert()(failure_context(RuntimeError(REASON)))
    finally:
        sink.stop()
    [posted] = sink.received
    text = posted["text"]
    assert text.startswith("*rossmann_forecast task failed*\n")
    assert "task_id: predict" in text and "log_url: http://airflow/log?task_id=predict" in text
    assert "reason: predict failed: s3://b/runs/f/test: column Open must be 0, 1 or blank" in text
    assert_no_rows(text)


def test_slack_retries_a_5xx_and_not_a_4xx_and_gives_up_after_the_bound(monkeypatch, quick_retries):
    flaky = HttpSink(statuses=[503, 500])
    connect(monkeypatch, slack_connection(flaky))
    alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
    assert len(flaky.received) == 3          # two 5xx, then delivered; the SDK's own retries are off
    flaky.stop()
    down = HttpSink(statuses=[503] * 10)
    connect(monkeypatch, slack_connection(down))
    with pytest.raises(alerts.Undelivered, match="503"):
        alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
    assert len(down.received) == alerts.ATTEMPTS
    down.stop()
    revoked = HttpSink(statuses=[404])
    connect(monkeypatch, slack_connection(revoked))
    with pytest.raises(alerts.Undelivered, match="404"):
        alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
    assert len(revoked.received) == 1        # a revoked webhook stays revoked
    revoked.stop()


def test_a_hung_slack_webhook_times_out(monkeypatch, quick_retries):
    monkeypatch.setattr(alerts, "TIMEOUT_S", (0.5, 0.5))
    hung = HttpSink(delay_s=3.0)
    connect(monkeypatch, slack_connection(hung))
    started = time.perf_counter()
    try:
        with pytest.raises(alerts.Undelivered, match="not reached"):
            alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
    finally:
        hung.stop()
    assert len(hung.received) == alerts.ATTEMPTS and time.perf_counter() - started < alerts.ATTEMPTS * 3.0


def smtp_connection(sink: SmtpSink, **extra) -> dict:
    return {"conn_type": "smtp", "host": "127.0.0.1", "port": sink.port,
            "extra": {"from_email": "airflow@example.com", "disable_ssl": True, "disable_tls": True, **extra}}


def test_an_smtp_connection_mails_the_reason_and_log_link_to_its_recipients(monkeypatch):
    sink = SmtpSink()
    connect(monkeypatch, smtp_connection(sink, to=["oncall@example.com", "data@example.com"]))
    try:
        alerts.task_failure_alert()(failure_context(RuntimeError(REASON)))
    finally:
        sink.stop()
    [mail] = sink.mails
    assert mail["rcpt"] == ["<oncall@example.com>", "<data@example.com>"]
    assert "Subject: rossmann_forecast task failed" in mail["data"]
    message = email.message_from_string(mail["data"])
    [html_part] = [part for part in message.walk() if part.get_content_type() == "text/html"]
    body = html_part.get_payload(decode=True).decode()
    assert "log_url: http://airflow/log?task_id=predict" in body and "task_id: predict" in body
    assert "column Open must be 0, 1 or blank" in body
    assert_no_rows(body)


def test_smtp_retries_a_busy_server_not_a_refused_recipient_and_needs_recipients(monkeypatch, quick_retries):
    busy = SmtpSink(greetings=[421, 421])
    connect(monkeypatch, smtp_connection(busy, to="oncall@example.com"))
    alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
    assert busy.connections == 3 and len(busy.mails) == 1
    busy.stop()
    refusing = SmtpSink(rcpt_code=550)
    connect(monkeypatch, smtp_connection(refusing, to="nobody@example.com"))
    with pytest.raises(alerts.Undelivered, match="refused"):
        alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
    assert refusing.connections == 1 and refusing.mails == []
    connect(monkeypatch, smtp_connection(refusing))
    with pytest.raises(alerts.Undelivered, match='extra "to"'):
        alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
    assert refusing.connections == 1
    refusing.stop()


def apprise_connection(sink: HttpSink) -> dict:
    return {"conn_type": "apprise",
            "extra": {"config": {"path": sink.url.replace("http://", "json://") + "/alerts", "tag": "oncall"}}}


def test_an_apprise_connection_notifies_its_urls_and_a_failed_delivery_is_retried_then_raised(monkeypatch,
                                                                                              quick_retries):
    sink = HttpSink()
    connect(monkeypatch, apprise_connection(sink))
    alerts.task_failure_alert()(failure_context(RuntimeError(REASON)))
    [posted] = sink.received
    assert posted["title"] == "rossmann_forecast task failed"
    assert "log_url: http://airflow/log?task_id=predict" in posted["message"]
    assert_no_rows(json.dumps(posted))
    sink.stop()
    down = HttpSink(statuses=[503] * 10)
    connect(monkeypatch, apprise_connection(down))
    with pytest.raises(alerts.Undelivered, match="none of the connection's URLs"):
        alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
    assert len(down.received) == alerts.ATTEMPTS
    down.stop()


def test_a_connection_of_another_type_is_refused_naming_the_types_an_alert_can_use(monkeypatch):
    connect(monkeypatch, {"conn_type": "postgres", "host": "127.0.0.1"})
    with pytest.raises(ValueError, match=r"'postgres'.*\['apprise', 'http', 'slackwebhook', 'smtp'\]"):
        alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))


def test_a_channel_whose_provider_is_missing_names_the_extra_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "airflow.providers.slack.notifications.slack_webhook", None)
    sink = HttpSink()
    connect(monkeypatch, slack_connection(sink))
    try:
        with pytest.raises(RuntimeError, match=r"pip install 'rossmann-forecast\[slack\]'"):
            alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
    finally:
        sink.stop()
    assert sink.received == []
