"""The scoring branch's Airflow-side helpers: registry URIs, which forecasts a drop can score, the XCom summary."""
from __future__ import annotations

import json
from datetime import date

import pytest

from rossmann import past_forecast_tasks
from rossmann.publication import forecast_registry_record
from rossmann.uris import forecast_record_key, forecast_record_uri, plan_run_uris, run_key

HISTORY = "s3://b/forecast/history"


class MemoryS3:
    """The few S3Hook calls the helpers make, on a dict of s3://bucket/key -> text."""

    def __init__(self, objects: dict[str, str] | None = None):
        self.objects = dict(objects or {})

    def check_for_key(self, key, bucket):
        return f"s3://{bucket}/{key}" in self.objects

    def read_key(self, key, bucket):
        return self.objects[f"s3://{bucket}/{key}"]

    def load_string(self, text, key, bucket, replace=False):
        self.objects[f"s3://{bucket}/{key}"] = text

    def list_keys(self, bucket_name, prefix):
        start = f"s3://{bucket_name}/"
        return [uri[len(start):] for uri in self.objects if uri.startswith(start + prefix)]


def record(as_of: str, run: str, start: str, end: str) -> dict:
    return {"as_of": as_of, "run_id": run, "run_key": run, "predictions_uri": f"s3://b/runs/{as_of}/{run}/p",
            "horizon_start": start, "horizon_end": end}


def entry(scoring_date: str, end: str) -> dict:
    return {"scoring_date": scoring_date, "horizon": {"start": "2015-08-01", "end": end}, "status": "scored"}


def test_plan_names_the_registry_record_scores_and_the_run_scoped_list():
    plan = plan_run_uris("rossmann", date(2015, 8, 3), "scheduled__2015-08-03T00:00:00+00:00")
    key = run_key("scheduled__2015-08-03T00:00:00+00:00")
    assert plan["forecast_history"] == "s3://rossmann/forecast/history"
    assert plan["forecast_record"] == f"s3://rossmann/forecast/history/2015-08-03/{key}.json"
    assert plan["scores"] == "s3://rossmann/forecast/scores"
    assert plan["scores_summary"] == "s3://rossmann/forecast/scores/summary.json"
    assert plan["scores_report"] == "s3://rossmann/forecast/scores/report/index.html"
    assert plan["scoring_forecasts"] == f"s3://rossmann/runs/2015-08-03/{key}/scoring/forecasts.json"


def test_registry_record_names_round_trip_and_other_objects_are_ignored():
    uri = forecast_record_uri(HISTORY, "2015-07-31", "manual__x")
    assert uri == f"{HISTORY}/2015-07-31/manual__x.json"
    assert forecast_record_key(uri) == ("2015-07-31", "manual__x")
    for other in (f"{HISTORY}/2015-07-31/manual__x.json.tmp", f"{HISTORY}/2015-7-31/r.json",
                  f"{HISTORY}/2015-02-30/r.json", f"{HISTORY}/notes.txt", f"{HISTORY}/2015-07-31/.json"):
        assert forecast_record_key(other) is None, other


@pytest.mark.parametrize("scoring_date, scored_on, end, finished", [
    ("2015-09-20", "2015-09-17", "2015-09-17", True),    # scored through the horizon's end by an earlier drop
    ("2015-09-20", "2015-09-19", "2015-09-17", True),
    ("2015-09-17", "2015-09-17", "2015-09-17", False),   # a re-run of the date that finished it re-scores it
    ("2015-09-20", "2015-09-16", "2015-09-17", False),   # its last day has no score yet
    ("2015-09-10", "2015-09-18", "2015-09-17", False),   # a backfill of an earlier date: scored as of that date
])
def test_a_forecast_is_finished_once_an_earlier_drop_scored_its_whole_horizon(scoring_date, scored_on, end,
                                                                              finished):
    assert past_forecast_tasks.finished_before(entry(scored_on, end), scoring_date) is finished
    assert past_forecast_tasks.finished_before(None, scoring_date) is False


def test_candidates_are_earlier_forecasts_not_yet_finished():
    uris = [forecast_record_uri(HISTORY, day, run) for day, run in
            [("2015-08-01", "r1"), ("2015-07-31", "r2"), ("2015-08-03", "r3"), ("2015-08-04", "r4"),
             ("2015-06-01", "old")]] + [f"{HISTORY}/README"]
    summary = {"forecasts": {"2015-06-01/old": entry("2015-07-20", "2015-07-19"),
                             "2015-07-31/r2": entry("2015-08-02", "2015-09-17")}}
    assert past_forecast_tasks.candidate_uris(uris, "2015-08-03", summary) == [
        f"{HISTORY}/2015-07-31/r2.json", f"{HISTORY}/2015-08-01/r1.json"]
    assert len(past_forecast_tasks.candidate_uris(uris, "2015-08-03", None)) == 3


def test_selection_keeps_forecasts_made_before_the_date_whose_horizon_started():
    records = [record("2015-08-02", "b", "2015-08-03", "2015-09-19"), record("2015-08-02", "a", "2015-08-03",
                                                                             "2015-09-19"),
               record("2015-07-31", "c", "2015-08-05", "2015-09-17"),   # its horizon starts later
               record("2015-08-03", "d", "2015-08-04", "2015-09-20")]   # made on the scoring date itself
    chosen = past_forecast_tasks.select_forecasts(records, "2015-08-03")
    assert [(r["as_of"], r["run_id"]) for r in chosen] == [("2015-08-02", "a"), ("2015-08-02", "b")]
    assert past_forecast_tasks.select_forecasts(records, "2015-08-02") == []


def test_find_writes_the_list_and_returns_its_uri_or_none_when_empty():
    plan = plan_run_uris("b", date(2015, 8, 3), "run3")
    hook = MemoryS3({forecast_record_uri(HISTORY, "2015-08-01", "run1"):
                     json.dumps(record("2015-08-01", "run1", "2015-08-02", "2015-09-18")),
                     forecast_record_uri(HISTORY, "2015-08-03", "run3"):
                     json.dumps(record("2015-08-03", "run3", "2015-08-04", "2015-09-20"))})
    assert past_forecast_tasks.find_forecasts_to_score(hook, plan) == plan["scoring_forecasts"]
    assert [r["run_id"] for r in json.loads(hook.objects[plan["scoring_forecasts"]])] == ["run1"]
    again = past_forecast_tasks.find_forecasts_to_score(hook, plan)            # a re-run: same list
    assert again == plan["scoring_forecasts"]

    earlier = plan_run_uris("b", date(2015, 8, 1), "run1")
    assert past_forecast_tasks.find_forecasts_to_score(hook, earlier) is None   # nothing before it: skipped
    assert json.loads(hook.objects[earlier["scoring_forecasts"]]) == []


def test_registry_record_carries_what_the_scoring_job_needs():
    forecast = {"as_of": "2015-07-31", "run_id": "manual__2015-07-31T00:00:00+00:00", "predictions_uri": "s3://p",
                "submission_uri": "s3://s", "report_uri": "s3://r", "model_uri": "s3://m"}
    out = forecast_registry_record(forecast, {"horizon": {"start": "2015-08-01", "end": "2015-09-17"}})
    assert out == {"as_of": "2015-07-31", "run_id": forecast["run_id"], "run_key": run_key(forecast["run_id"]),
                   "predictions_uri": "s3://p", "submission_uri": "s3://s", "report_uri": "s3://r",
                   "horizon_start": "2015-08-01", "horizon_end": "2015-09-17", "forecast_model": None,
                   "fallback_reason": None, "published_uri": None, "source_attempt_uri": None,
                   "forecast_sha256": None, "decided_at": None}
    with pytest.raises(ValueError, match="no horizon"):
        forecast_registry_record(forecast, {"rows": {}})


def test_compact_summary_compares_model_and_baseline_and_names_the_newest_forecast():
    plan = plan_run_uris("b", date(2015, 8, 5), "run5")
    scored = {"as_of": "2015-08-02", "run_id": "r2", "scoring_date": "2015-08-05", "status": "scored",
              "days_scored": 3, "rows": 30, "model_exp_rmspe": 0.1, "baseline_exp_rmspe": 0.2, "by_lead_day": []}
    older = {**scored, "as_of": "2015-08-01", "run_id": "r1", "days_scored": 4, "rows": 40}
    pending = {**scored, "as_of": "2015-08-04", "run_id": "r4", "status": "pending", "rows": 0,
               "model_exp_rmspe": None, "baseline_exp_rmspe": None}
    summary = {"forecasts": {"2015-08-01/r1": older, "2015-08-02/r2": scored, "2015-08-04/r4": pending},
               "pending": ["2015-08-04/r4"], "scored_through": "2015-08-05",
               "overall": {"forecasts_scored": 2, "rows": 70, "model_exp_rmspe": 0.1, "baseline_exp_rmspe": 0.2}}
    compact = past_forecast_tasks.compact_summary(summary, plan)
    assert compact["beats_baseline"] is True and compact["pending"] == 1 and compact["rows"] == 70
    assert compact["newest"]["as_of"] == "2015-08-02" and compact["newest"]["days_scored"] == 3
    assert compact["summary_uri"] == plan["scores_summary"] and compact["scoring_date"] == "2015-08-05"
    json.dumps(compact)   # XCom and the asset's extra must be plain JSON


# --- bias in production: the recent check and the drift alert ---------------------------------------------------

def recent(scoring_date: str = "2015-08-05", rows: int = 140, model: float | None = 0.1,
           baseline: float | None = 0.2, ratio: float | None = 1.01, baseline_ratio: float | None = 0.99) -> dict:
    """summary.json's "recent" block as the score job writes it (rossmann_jobs/past_forecasts/records.py)."""
    return {"scoring_date": scoring_date, "window_days": 14, "dates": {"start": "2015-07-23", "end": scoring_date},
            "forecasts": 3, "rows": rows, "days": 14 if rows else 0, "model_exp_rmspe": model,
            "baseline_exp_rmspe": baseline, "model_median_ratio": ratio, "baseline_median_ratio": baseline_ratio}


@pytest.mark.parametrize("block, threshold, expected", [
    (recent(ratio=1.08), 0.05, ["bias: the model's median forecast/actual ratio over the last 14 days up to "
                                "2015-08-05 (140 rows) is 1.0800, off 1 by more than 0.05 (too high)"]),
    (recent(ratio=0.93), 0.05, ["bias: the model's median forecast/actual ratio over the last 14 days up to "
                                "2015-08-05 (140 rows) is 0.9300, off 1 by more than 0.05 (too low)"]),
    (recent(ratio=1.08), 0.1, []),                       # the DAG param widens the band
    (recent(ratio=1.05), 0.05, []),                      # on the band's edge (1.05 - 1 > 0.05 in floats)
    (recent(ratio=0.95), 0.05, []),
    (recent(ratio=1.0501), 0.05, ["bias"]),
    (recent(model=0.25, baseline=0.2), 0.05, ["baseline: the model's exp-RMSPE over the last 14 days up to "
                                              "2015-08-05 (140 rows) is 0.2500, worse than the naive baseline's "
                                              "0.2000 on the same rows"]),
    (recent(model=0.2, baseline=0.2), 0.05, []),         # a tie does not lose
    (recent(ratio=1.2, model=0.3, baseline=0.2), 0.05, ["bias", "baseline"]),
    (recent(), 0.05, []),
])
def test_drift_findings_name_each_failed_check_with_its_numbers(block, threshold, expected):
    findings = past_forecast_tasks.drift_findings(block, threshold)
    if all(" " not in e for e in expected):   # only the checks' names given
        assert [f.split(":")[0] for f in findings] == expected
    else:
        assert findings == expected


@pytest.mark.parametrize("block, scoring_date, not_checked", [
    (None, None, ["summary.json has no recent check"]),
    (recent(rows=0, model=None, baseline=None, ratio=None, baseline_ratio=None), None,
     ["no actual to score in the last 14 days up to 2015-08-05 (0 rows)"]),
    (recent(baseline=None, baseline_ratio=None), None, ["baseline: model exp-RMSPE 0.1, baseline exp-RMSPE None"]),
    (recent(ratio=None), None, ["bias: no model median ratio"]),
    (recent(ratio=1.3), "2015-08-04", ["the recent check is the drop for 2015-08-05's, not this run's (2015-08-04)"]),
])
def test_missing_numbers_raise_no_alert_but_say_what_was_not_checked(block, scoring_date, not_checked):
    checks = past_forecast_tasks.drift_checks(block, 0.05, scoring_date)
    assert checks["findings"] == [] and past_forecast_tasks.drift_findings(block, 0.05, scoring_date) == []
    assert len(checks["not_checked"]) == len(not_checked)
    for said, expected in zip(checks["not_checked"], not_checked):
        assert said.startswith(expected), said


def test_a_model_without_baseline_is_still_checked_for_bias():
    checks = past_forecast_tasks.drift_checks(recent(ratio=1.1, baseline=None, baseline_ratio=None), 0.05)
    assert [f.split(":")[0] for f in checks["findings"]] == ["bias"] and len(checks["not_checked"]) == 1


def scores_summary(block: dict | None) -> dict:
    entry = {"as_of": "2015-08-02", "run_id": "r2", "scoring_date": "2015-08-05", "status": "scored",
             "days_scored": 3, "rows": 30, "model_exp_rmspe": 0.1, "baseline_exp_rmspe": 0.2, "by_lead_day": []}
    summary = {"forecasts": {"2015-08-02/r2": entry}, "pending": [], "scored_through": "2015-08-05",
               "overall": {"forecasts_scored": 1, "rows": 30, "model_exp_rmspe": 0.1, "baseline_exp_rmspe": 0.2}}
    return summary if block is None else {**summary, "recent": block}


@pytest.fixture()
def alert_sink(monkeypatch):
    """A local webhook behind the rossmann_alerts connection: the notifier's real HTTP post lands in it."""
    from stack_helpers import AlertSink

    sink = AlertSink()
    for name, value in sink.connection_env.items():
        monkeypatch.setenv(name, value)
    yield sink
    sink.stop()


def publish(block: dict | None, threshold: float = 0.05) -> dict:
    plan = plan_run_uris("b", date(2015, 8, 5), "scheduled__2015-08-05T00:00:00+00:00")
    hook = MemoryS3({plan["scores_summary"]: json.dumps(scores_summary(block))})
    return past_forecast_tasks.publish_scores(hook, plan, threshold, {"run_id": "scheduled__2015-08-05T00:00:00+00:00"})


def test_publish_posts_one_drift_alert_with_the_failed_checks_and_their_numbers(alert_sink):
    compact = publish(recent(ratio=1.08, model=0.3, baseline=0.2))
    [message] = alert_sink.received
    assert message["alert"] == "rossmann forecast drift" and message["as_of"] == "2015-08-05"
    assert message["run_id"] == "scheduled__2015-08-05T00:00:00+00:00" and message["bias_alert_threshold"] == 0.05
    assert [f.split(":")[0] for f in message["findings"]] == ["bias", "baseline"]
    assert "1.0800" in message["findings"][0] and "0.3000" in message["findings"][1]
    assert (message["model_median_ratio"], message["model_exp_rmspe"], message["baseline_exp_rmspe"]) == (
        1.08, 0.3, 0.2)
    assert message["rows"] == 140 and message["window_days"] == 14
    assert message["report_uri"] == "s3://b/forecast/scores/report/index.html"
    assert "{{" not in json.dumps(message)           # plain values: nothing left unrendered
    # The task still publishes: the XCom says what was checked and that it alerted.
    assert compact["alert"]["alerted"] is True and compact["alert"]["findings"] == message["findings"]
    assert compact["recent"]["model_median_ratio"] == 1.08 and compact["rows"] == 30
    json.dumps(compact)


@pytest.mark.parametrize("block", [recent(ratio=1.04), None, recent(scoring_date="2015-08-09", ratio=1.3),
                                   recent(rows=0, model=None, baseline=None, ratio=None, baseline_ratio=None)])
def test_publish_posts_nothing_when_no_check_fails(alert_sink, block):
    compact = publish(block)
    assert alert_sink.received == []
    assert compact["alert"]["alerted"] is False and compact["alert"]["findings"] == []
    assert compact["alert"]["bias_alert_threshold"] == 0.05
    assert bool(compact["alert"]["not_checked"]) is (block is None or block["rows"] == 0
                                                     or block["scoring_date"] != "2015-08-05")


def test_the_threshold_param_decides(alert_sink):
    assert publish(recent(ratio=1.08), threshold=0.1)["alert"]["alerted"] is False
    assert alert_sink.received == []


def test_without_the_connection_or_with_the_endpoint_down_the_scores_are_still_published(monkeypatch, capsys):
    monkeypatch.delenv("AIRFLOW_CONN_ROSSMANN_ALERTS", raising=False)
    compact = publish(recent(ratio=1.08))
    assert compact["alert"]["alerted"] is True and "post_error" not in compact["alert"]
    assert "no 'rossmann_alerts' connection: alert not sent" in capsys.readouterr().out   # the notifier's own log

    closed = {"conn_type": "http", "host": "127.0.0.1", "port": 9, "schema": "http"}   # nothing listens there
    monkeypatch.setenv("AIRFLOW_CONN_ROSSMANN_ALERTS", json.dumps(closed))
    compact = publish(recent(ratio=1.08))
    assert compact["alert"]["alerted"] is True and compact["alert"]["post_error"] == "ConnectionError"
