"""The whole DAG through `airflow dags test` on the embedded stack: real moto S3 server, real spark-submit of the
prepare/train/predict jobs, 2 Horovod processes. One run per logical date feeds many assertions."""
from __future__ import annotations

import csv
import io
import math

import pytest
from stack_helpers import SMALL_RUN_CONF

pytestmark = pytest.mark.slow

FIRST_DATE = "2015-07-31"   # last day of train.csv
EARLIER_DATE = "2015-06-30"  # a backfill-style run: must not see July's sales
TASKS = ["plan_run", "wait_for_raw_drop", "prepare_features", "train_model", "read_train_metrics", "quality_gate",
         "predict", "publish_forecast"]


def run_dag(stack, logical_date: str, conf: dict) -> dict:
    stack.land(logical_date, logical_date)
    result = stack.dags_test(logical_date, conf)
    summary = stack.run_summary(logical_date)
    assert "success" in summary["state"] and sorted(summary["tasks"]) == sorted(TASKS), (
        f"run for {logical_date} ended {summary['state']}: {summary['tasks']}\n{result.stdout[-6000:]}")
    return {"summary": summary, "output": result.stdout + result.stderr}


@pytest.fixture(scope="module")
def first_run(dag_test_stack):
    return run_dag(dag_test_stack, FIRST_DATE, SMALL_RUN_CONF)


@pytest.fixture(scope="module")
def earlier_run(dag_test_stack, first_run):
    # A negative tolerance demands a 99 % improvement: the gate must keep the first run's champion.
    return run_dag(dag_test_stack, EARLIER_DATE, {**SMALL_RUN_CONF, "promotion_tolerance": -0.99})


def committed_attempt(stack, out_uri: str) -> str:
    manifest = stack.read_json(f"{out_uri}/_SUCCESS")
    return f"{out_uri}/{manifest['attempt']}"


def parquet_dates(stack, prefix_uri: str) -> list[str]:
    import pyarrow.parquet as pq

    dates: list[str] = []
    for uri in stack.list_keys(prefix_uri):
        if uri.endswith(".parquet"):
            table = pq.read_table(io.BytesIO(stack.read_bytes(uri)), columns=["Date"])
            dates += [str(value) for value in table.column("Date").to_pylist()]
    return dates


def test_every_task_succeeds_once(first_run):
    tasks = first_run["summary"]["tasks"]
    assert sorted(tasks) == sorted(TASKS)
    assert all("success" in info["state"] for info in tasks.values()), tasks


def test_plan_xcom_holds_run_scoped_uris(dag_test_stack, first_run):
    summary = first_run["summary"]
    plan = summary["xcom"]["plan_run"]
    bucket = dag_test_stack.bucket
    assert plan["as_of"] == FIRST_DATE
    assert plan["raw"] == f"s3://{bucket}/raw/{FIRST_DATE}"
    run_root = f"s3://{bucket}/runs/{FIRST_DATE}/"
    for name in ("features", "model", "predictions"):
        assert plan[name].startswith(run_root) and plan[name].endswith(f"/{name}")
    assert len({plan["features"].rsplit("/", 2)[0], plan["model"].rsplit("/", 2)[0]}) == 1
    assert plan["champion"] == f"s3://{bucket}/models/champion.json"


def test_prepare_gets_the_logical_date_as_as_of(dag_test_stack, first_run):
    plan = first_run["summary"]["xcom"]["plan_run"]
    args = first_run["summary"]["rendered_fields"]["prepare_features"]["application_args"]
    assert args[args.index("--as-of") + 1] == FIRST_DATE
    assert args[args.index("--raw") + 1] == plan["raw"]
    metadata = dag_test_stack.read_json(f"{committed_attempt(dag_test_stack, plan['features'])}/metadata.json")
    assert metadata["as_of"] == FIRST_DATE


def test_train_metrics_xcom_matches_the_committed_metrics_file(dag_test_stack, first_run):
    xcom = first_run["summary"]["xcom"]
    plan, metrics = xcom["plan_run"], xcom["read_train_metrics"]
    attempt = committed_attempt(dag_test_stack, plan["model"])
    stored = dag_test_stack.read_json(f"{attempt}/metrics.json")
    assert metrics["metrics_uri"] == f"{attempt}/metrics.json"
    assert metrics["best_val_exp_rmspe"] == pytest.approx(stored["best_val_exp_rmspe"])
    assert 0 < metrics["best_val_exp_rmspe"] and math.isfinite(metrics["best_val_exp_rmspe"])
    assert metrics["horovod_size"] == stored["horovod_size"] == SMALL_RUN_CONF["num_proc"]
    assert 1 <= metrics["epochs_run"] <= SMALL_RUN_CONF["epochs"]
    assert metrics["samples_per_s"] > 0
    assert metrics["model_uri"] == plan["model"]
    keys = dag_test_stack.list_keys(attempt)
    assert f"{attempt}/model/model.h5" in keys and f"{attempt}/model/artifact.json" in keys


def test_first_model_becomes_champion(dag_test_stack, first_run):
    xcom = first_run["summary"]["xcom"]
    plan, metrics, gate = xcom["plan_run"], xcom["read_train_metrics"], xcom["quality_gate"]
    assert gate["promoted"] is True and gate["champion_val_exp_rmspe"] is None
    assert gate["candidate_val_exp_rmspe"] == pytest.approx(metrics["best_val_exp_rmspe"])
    assert gate["champion_model_uri"] == plan["model"]
    assert "quality gate:" in first_run["output"] and "PROMOTED" in first_run["output"]
    predict_args = first_run["summary"]["rendered_fields"]["predict"]["application_args"]
    assert predict_args[predict_args.index("--model") + 1] == plan["model"]


def test_forecast_is_published_with_submission_and_report(dag_test_stack, first_run):
    xcom = first_run["summary"]["xcom"]
    plan, forecast = xcom["plan_run"], xcom["publish_forecast"]
    attempt = committed_attempt(dag_test_stack, plan["predictions"])
    assert forecast["submission_uri"] == f"{attempt}/submission.csv"
    assert forecast["report_uri"] == f"{attempt}/report/index.html"
    assert dag_test_stack.read_json(plan["forecast_pointer"]) == forecast

    raw_test = list(csv.DictReader(io.StringIO(dag_test_stack.read_bytes(f"{plan['raw']}/test.csv").decode())))
    submission = list(csv.DictReader(io.StringIO(dag_test_stack.read_bytes(forecast["submission_uri"]).decode())))
    assert list(submission[0]) == ["Id", "Sales"]
    assert sorted(int(row["Id"]) for row in submission) == sorted(int(row["Id"]) for row in raw_test)
    closed = {row["Id"] for row in raw_test if row["Open"] == "0"}
    assert all(float(row["Sales"]) == 0 for row in submission if row["Id"] in closed)
    assert all(float(row["Sales"]) > 0 for row in submission if row["Id"] not in closed)
    assert b"<html" in dag_test_stack.read_bytes(forecast["report_uri"]).lower()
    assert any(uri.endswith(".png") for uri in dag_test_stack.list_keys(f"{attempt}/report"))
    assert forecast["forecast_val_exp_rmspe"] > 0


def test_forecast_asset_event_is_emitted(first_run):
    forecast = first_run["summary"]["xcom"]["publish_forecast"]
    events = first_run["summary"]["asset_events"]
    assert [event["name"] for event in events] == ["rossmann_forecast"]
    assert events[0]["extra"]["submission_uri"] == forecast["submission_uri"]


def test_s3_secret_never_reaches_logs_xcom_or_rendered_fields(dag_test_stack, first_run):
    import json

    secret = dag_test_stack.secret_key
    assert len(secret) > 20
    assert "Spark-Submit cmd" in first_run["output"]  # the logs we search do include the spark-submit output
    assert secret not in first_run["output"]
    assert secret not in dag_test_stack.task_logs()
    assert secret not in json.dumps(first_run["summary"])


def test_earlier_run_trains_only_on_data_up_to_its_as_of_date(dag_test_stack, first_run, earlier_run):
    for run, as_of in ((first_run, FIRST_DATE), (earlier_run, EARLIER_DATE)):
        plan = run["summary"]["xcom"]["plan_run"]
        attempt = committed_attempt(dag_test_stack, plan["features"])
        train_dates = parquet_dates(dag_test_stack, f"{attempt}/train")
        validation_dates = parquet_dates(dag_test_stack, f"{attempt}/validation")
        # Max date equals as_of: the cut-off is exact, not merely conservative (the drop has data until 07-31).
        assert max(train_dates + validation_dates)[:10] == as_of
        assert dag_test_stack.read_json(f"{attempt}/metadata.json")["as_of"] == as_of


def test_gate_keeps_the_champion_when_the_new_model_is_not_good_enough(dag_test_stack, first_run, earlier_run):
    first_plan = first_run["summary"]["xcom"]["plan_run"]
    xcom = earlier_run["summary"]["xcom"]
    gate, metrics = xcom["quality_gate"], xcom["read_train_metrics"]
    champion_score = first_run["summary"]["xcom"]["read_train_metrics"]["best_val_exp_rmspe"]
    assert gate["champion_val_exp_rmspe"] == pytest.approx(champion_score)
    assert gate["threshold"] == pytest.approx(champion_score * 0.01)
    assert gate["promoted"] is False and " > " in gate["reason"]
    assert gate["champion_model_uri"] == first_plan["model"]
    predict_args = earlier_run["summary"]["rendered_fields"]["predict"]["application_args"]
    assert predict_args[predict_args.index("--model") + 1] == first_plan["model"]
    champion = dag_test_stack.read_json(first_plan["champion"])
    assert champion["model_uri"] == first_plan["model"] and champion["as_of"] == FIRST_DATE
    assert metrics["best_val_exp_rmspe"] > gate["threshold"]
