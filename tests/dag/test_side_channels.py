"""Side channels carry no data: the failure alert holds the reason without example rows and the log link, posts with
a timeout and a bounded retry; presigned report URLs reach only the extra link (its XCom), never a task log."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
import requests

from rossmann import alerts

ROWS = "[{'Id': 4711, 'StoreId': 12, 'Date': '2015-08-03', 'Open': 7}]"
REASON = ("predict failed: s3://b/runs/f/test: column Open must be 0, 1 or blank; 1 row(s) differ, e.g. " + ROWS)


class Webhook:
    """A local alert endpoint that answers each POST with the next status of `statuses` (then 204), or sleeps."""

    def __init__(self, statuses=(), delay_s: float = 0.0):
        received = self.received = []
        answers = list(statuses)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):   # noqa: N802 (http.server's naming)
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                time.sleep(delay_s)
                self.send_response(answers.pop(0) if answers else 204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def connect(self, monkeypatch) -> None:
        monkeypatch.setenv("AIRFLOW_CONN_ROSSMANN_ALERTS", json.dumps(
            {"conn_type": "http", "host": "127.0.0.1", "port": self.server.server_address[1], "schema": "http"}))

    def stop(self) -> None:
        self.server.shutdown()


@pytest.fixture()
def quick_retries(monkeypatch):
    monkeypatch.setattr(alerts, "RETRY_DELAY_S", 0.01)
    monkeypatch.setattr(alerts, "TIMEOUT_S", (1.0, 0.5))


def failure_context(exception: Exception) -> dict:
    from airflow.sdk import DAG

    return {"dag": DAG("rossmann_forecast", schedule=None), "run_id": "manual__2015-08-01", "ds": "2015-08-01",
            "ti": SimpleNamespace(task_id="predict", try_number=3, log_url="http://airflow/log?task_id=predict"),
            "exception": exception}


def test_the_reason_stops_before_the_example_rows_and_is_bounded():
    assert alerts.alert_reason(REASON) == ("predict failed: s3://b/runs/f/test: column Open must be 0, 1 or blank; "
                                           "1 row(s) differ [examples and details: see the task log]")
    assert alerts.alert_reason("train failed: no validation rows") == "train failed: no validation rows"
    assert len(alerts.alert_reason("x" * 5000)) < alerts.MAX_REASON_CHARS + 50


def job_refusals() -> dict[str, str]:
    """Refusals as the jobs word them (their own code), each quoting file content before any "e.g."."""
    from rossmann_jobs.features import drop_manifest, raw_schemas, validate

    refusals = {}
    try:
        validate.parse_header(raw_schemas.STORE, b"Store;StoreType;SupplierMarginSecret\n1;a;0.37\n")
    except validate.RawInputError as error:
        refusals["header"] = str(error)
    digest = drop_manifest.FileDigest()
    digest.update(b"Store,Date,Sales\n1,2015-07-31,SalesSecret5263\x00\x00\x00\n")
    refusals["corruption"] = ("prepare failed: train.csv: the file is corrupted, it holds "
                              f"{digest.corruption.describe()}")
    refusals["spark-submit"] = ("Cannot execute: spark-submit --master local[2] prepare.py --raw s3://b/raw. "
                                "Error code is: 1.\nSpark-submit log tail:\n  ValueError: SalesSecret5263 in Store 12")
    return refusals


def test_no_file_content_reaches_the_alert_however_the_reason_quotes_it():
    refusals = job_refusals()
    assert set(refusals) == {"header", "corruption", "spark-submit"}
    for kind, text in refusals.items():
        assert "Secret" in text   # the task log keeps what the job quoted
        reason = alerts.alert_reason(text)
        assert "Secret" not in reason and "5263" not in reason and "0.37" not in reason, (kind, reason)
        assert reason.endswith("see the task log]"), kind
    assert "store.csv" in alerts.alert_reason(refusals["header"])
    assert alerts.alert_reason(refusals["spark-submit"]).startswith("spark-submit exited with status 1")
    # file and column names are not data: they stay
    assert alerts.alert_reason("prepare failed: train.csv: column 'Open': the drop's values do not parse") == \
        "prepare failed: train.csv: column 'Open': the drop's values do not parse"


def test_the_failure_alert_posts_the_reason_and_log_link_without_rows(monkeypatch, quick_retries):
    hook = Webhook()
    hook.connect(monkeypatch)
    try:
        alerts.task_failure_alert()(failure_context(RuntimeError(REASON)))
    finally:
        hook.stop()
    [message] = hook.received
    assert message["log_url"] == "http://airflow/log?task_id=predict" and message["task_id"] == "predict"
    assert message["reason"].startswith("predict failed: s3://b/runs/f/test: column Open must be 0, 1 or blank")
    # Negative control: the rendered template holds the rows; the posted message does not.
    assert "4711" in REASON and "4711" not in json.dumps(message) and "2015-08-03" not in json.dumps(message)


def test_a_failing_endpoint_is_retried_a_bounded_number_of_times(monkeypatch, quick_retries):
    hook = Webhook(statuses=[503, 502])
    hook.connect(monkeypatch)
    try:
        alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
        assert len(hook.received) == 3                      # two 5xx, then delivered
        hook.received.clear()
        down = Webhook(statuses=[503] * 10)
        down.connect(monkeypatch)
        with pytest.raises(alerts.Undelivered, match="503"):
            alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
        assert len(down.received) == alerts.ATTEMPTS
        down.stop()
        refused = Webhook(statuses=[400])
        refused.connect(monkeypatch)
        with pytest.raises(alerts.Undelivered, match="400"):
            alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
        assert len(refused.received) == 1                   # a 4xx is not retried
        refused.stop()
    finally:
        hook.stop()


def test_a_hung_endpoint_times_out(monkeypatch, quick_retries):
    hook = Webhook(delay_s=3.0)
    hook.connect(monkeypatch)
    started = time.perf_counter()
    try:
        with pytest.raises(alerts.Undelivered) as undelivered:
            alerts.task_failure_alert()(failure_context(RuntimeError("train failed: x")))
        assert isinstance(undelivered.value.__cause__, requests.Timeout)
    finally:
        hook.stop()
    assert len(hook.received) == alerts.ATTEMPTS and time.perf_counter() - started < alerts.ATTEMPTS * 3.0


def test_publish_forecast_logs_and_returns_the_report_uri_never_a_presigned_url(caplog):
    import logging
    from datetime import date

    import boto3

    from rossmann import forecast_tasks
    from rossmann.report_link import presigned_url
    from rossmann.uris import plan_run_uris
    from rossmann_jobs.commit_protocol import manifest_document, manifest_uri
    from test_gate import FakeS3Hook

    hook = FakeS3Hook()
    # Presigning is local computation: a real client signs with made-up keys, no endpoint is contacted.
    hook.get_client_type = lambda config=None: boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="not-a-secret",
        config=config)
    plan = plan_run_uris("b", date(2015, 7, 31), "r1")
    attempt = f"{plan['predictions']}/attempts/a1"
    files = [f"{attempt}/{name}" for name in ("submission.csv", "report/index.html")]
    for uri in files:
        hook.load_string("content", *reversed(hook._split(uri)))
    hook.load_string(json.dumps(manifest_document(plan["predictions"], attempt, files,
                                                  {"validation_exp_rmspe": 0.1, "rows": {"test": 1},
                                                   "horizon": {"start": "2015-08-01", "end": "2015-09-17"}})),
                     *reversed(hook._split(manifest_uri(plan["predictions"]))))
    with caplog.at_level(logging.DEBUG):
        forecast, latest = forecast_tasks.publish_forecast(hook, plan, {"champion_model_uri": "s3://b/models/m"}, "r1")
    assert latest and f"forecast report (one self-contained page): {forecast['report_uri']}" in caplog.text
    assert "X-Amz-Signature" not in caplog.text + json.dumps(forecast)
    # Negative control: the link's URL carries the signature the grep looks for.
    assert "X-Amz-Signature=" in presigned_url(hook, forecast["report_uri"], 3600)
