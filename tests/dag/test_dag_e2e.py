"""The whole DAG through `airflow dags test` on the embedded stack: real moto S3 server, real spark-submit of the
prepare/train/predict jobs, 2 Horovod processes. One run per logical date feeds many assertions; the first run is
then cleared and every task of it re-run in place (idempotency)."""
from __future__ import annotations

import csv
import io
import json
import math
import subprocess

import pytest
from stack_helpers import AIRFLOW_PYTHON, DAG_ID, FIRST_DATE, REPO_ROOT, SMALL_RUN_CONF, TASKS, run_dag

pytestmark = pytest.mark.slow

EARLIER_DATE = "2015-06-30"  # a backfill-style run: must not see July's sales


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
    assert plan["champion_models"].startswith(f"s3://{bucket}/models/champions/{FIRST_DATE}/")


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
    assert "quality gate:" in first_run["output"] and "PROMOTED" in first_run["output"]
    # The champion is pinned: an immutable copy of exactly the committed attempt's files, which predict uses.
    attempt = committed_attempt(dag_test_stack, plan["model"])
    assert gate["candidate_model_uri"] == metrics["model_attempt_uri"] == attempt
    pinned = f"{plan['champion_models']}/{attempt.rsplit('/', 1)[-1]}"
    assert gate["champion_model_uri"] == pinned
    manifest = dag_test_stack.read_json(f"{plan['model']}/_SUCCESS")
    assert dag_test_stack.list_keys(pinned) == sorted(f"{pinned}/{name}" for name in manifest["files"])
    assert (dag_test_stack.read_bytes(f"{pinned}/model/model.h5")
            == dag_test_stack.read_bytes(f"{attempt}/model/model.h5"))
    champion = dag_test_stack.read_json(plan["champion"])
    assert champion["model_uri"] == pinned and champion["source_model_uri"] == attempt
    assert champion["val_exp_rmspe"] == pytest.approx(metrics["best_val_exp_rmspe"])
    predict_args = first_run["summary"]["rendered_fields"]["predict"]["application_args"]
    assert predict_args[predict_args.index("--model") + 1] == pinned


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
    secret = dag_test_stack.secret_key
    assert len(secret) > 20
    # `airflow dags test` runs tasks in-process and writes no task log files: its output is the task logs.
    output = first_run["output"]
    assert "Spark-Submit cmd" in output  # the logs we search do include the spark-submit output
    assert secret not in output
    assert secret not in json.dumps(first_run["summary"])  # XCom and every task's rendered template fields
    # Horovod's per-run key travels to the workers in _HOROVOD_SECRET_KEY: no environment dump may show it.
    assert "epoch 1/" in output  # the Horovod ranks' output is in what we searched
    assert "_HOROVOD_SECRET_KEY" not in output


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
    first_champion_uri = first_run["summary"]["xcom"]["quality_gate"]["champion_model_uri"]
    xcom = earlier_run["summary"]["xcom"]
    gate, metrics = xcom["quality_gate"], xcom["read_train_metrics"]
    champion_score = first_run["summary"]["xcom"]["read_train_metrics"]["best_val_exp_rmspe"]
    assert gate["champion_val_exp_rmspe"] == pytest.approx(champion_score)
    assert gate["threshold"] == pytest.approx(champion_score * 0.01)
    assert gate["promoted"] is False and " > " in gate["reason"]
    assert gate["champion_model_uri"] == first_champion_uri
    predict_args = earlier_run["summary"]["rendered_fields"]["predict"]["application_args"]
    assert predict_args[predict_args.index("--model") + 1] == first_champion_uri
    champion = dag_test_stack.read_json(first_plan["champion"])
    assert champion["model_uri"] == first_champion_uri and champion["as_of"] == FIRST_DATE
    assert metrics["best_val_exp_rmspe"] > gate["threshold"]


def test_earlier_run_forecast_does_not_replace_the_latest_forecast(dag_test_stack, first_run, earlier_run):
    """The backfill of an earlier date commits and reports its forecast, but latest.json keeps the newer one."""
    latest, earlier = (run["summary"]["xcom"]["publish_forecast"] for run in (first_run, earlier_run))
    assert earlier["as_of"] == EARLIER_DATE and dag_test_stack.read_bytes(earlier["submission_uri"])
    assert dag_test_stack.read_json(earlier_run["summary"]["xcom"]["plan_run"]["forecast_pointer"]) == latest
    assert latest["as_of"] == FIRST_DATE
    assert [(event["extra"]["as_of"], event["extra"]["latest"]) for event in earlier_run["summary"]["asset_events"]
            ] == [(EARLIER_DATE, False)]
    assert first_run["summary"]["asset_events"][0]["extra"]["latest"] is True


# --- Idempotency: clear the first run and re-run every task of it in place ----------------------------------------
# A second `airflow dags test` of the same date would not do: Airflow 3.3.2's DAG.test() deletes the date's run and
# creates a new one whose run id comes from the wall clock (manual__<now>), i.e. new run-scoped prefixes. So the
# fixture does what an operator does: `airflow tasks clear` the run, then runs each task again in DAG order with
# `airflow tasks test <dag> <task> <run id>` (which, in Airflow 3, records the task state and XCom of that run).
# Prepare re-commits identical features in a new attempt, so train's checkpoints (tied to the old attempt) do not
# resume and it trains afresh: the case where the champion's weights could change under an unchanged pointer.
OUTPUTS = ("features", "model", "predictions")
VOLATILE_METADATA = ("created_at", "timings_s", "shards")  # wall-clock facts and Spark's random part-file names


def split_table(stack, attempt_uri: str, split: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(io.BytesIO(stack.read_bytes(uri))) for uri in stack.list_keys(f"{attempt_uri}/{split}")
              if uri.endswith(".parquet")]
    return pa.concat_tables(tables).sort_by([("StoreId", "ascending"), ("Date", "ascending")])


def committed_content(stack, plan: dict) -> dict:
    """What a re-run must reproduce, read before it runs (it deletes the attempts it replaces)."""
    features = committed_attempt(stack, plan["features"])
    metadata = stack.read_json(f"{features}/metadata.json")
    model = committed_attempt(stack, plan["model"])
    return {
        "features_attempt": features,
        "model_attempt": model,
        "predictions_attempt": committed_attempt(stack, plan["predictions"]),
        "splits": {split: split_table(stack, features, split) for split in ("train", "validation", "test")},
        "metadata": {key: value for key, value in metadata.items() if key not in VOLATILE_METADATA},
        "model_metrics": stack.read_json(f"{model}/metrics.json"),
        "champion_bytes": stack.read_bytes(plan["champion"]),
    }


def submission_sales(stack, submission_uri: str) -> dict[int, float]:
    rows = csv.DictReader(io.StringIO(stack.read_bytes(submission_uri).decode()))
    return {int(row["Id"]): float(row["Sales"]) for row in rows}


def clear_and_rerun(stack, run_id: str, task_params: dict[str, dict]) -> str:
    """`airflow tasks clear` every task of the run, then run each again in DAG order; returns their output."""
    airflow = [str(AIRFLOW_PYTHON.parent / "airflow")]
    cleared = subprocess.run([*airflow, "tasks", "clear", DAG_ID, "-s", FIRST_DATE, "-e", FIRST_DATE, "-y"],
                             env=stack.process_env(), capture_output=True, text=True, timeout=600)
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    output = []
    for task in TASKS:
        params = ["-t", json.dumps(task_params[task])] if task in task_params else []
        ran = subprocess.run([*airflow, "tasks", "test", *params, DAG_ID, task, run_id], env=stack.process_env(),
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=1500)
        output.append(ran.stdout + ran.stderr)
        assert ran.returncode == 0, f"re-run of {task} failed:\n{output[-1][-6000:]}"
    return "\n".join(output)


@pytest.fixture(scope="module")
def rerun(dag_test_stack, first_run):
    plan = first_run["summary"]["xcom"]["plan_run"]
    before = committed_content(dag_test_stack, plan)
    before["submission"] = submission_sales(dag_test_stack, first_run["summary"]["xcom"]["publish_forecast"]
                                            ["submission_uri"])
    # A demanding tolerance makes "the re-trained model is not good enough" certain even if float round-off made the
    # re-trained score a hair better (a tie alone keeps the champion: the gate's strictly-better rule for re-runs).
    output = clear_and_rerun(dag_test_stack, first_run["summary"]["run_id"],
                             {"quality_gate": {"promotion_tolerance": -0.99}})
    summary = dag_test_stack.run_summary(FIRST_DATE)
    assert summary["run_id"] == first_run["summary"]["run_id"]
    assert {task: info["state"] for task, info in summary["tasks"].items()} == {task: "success" for task in TASKS}, (
        summary["tasks"])
    return {"summary": summary, "output": output, "before": before}


def test_rerun_keeps_every_xcom_uri(first_run, rerun):
    first, again = first_run["summary"], rerun["summary"]
    assert again["xcom"]["plan_run"] == first["xcom"]["plan_run"]
    assert again["xcom"]["read_train_metrics"]["model_uri"] == first["xcom"]["read_train_metrics"]["model_uri"]
    # The same job arguments, predict's --model (the kept champion) included.
    for task in ("prepare_features", "train_model", "predict"):
        assert again["rendered_fields"][task]["application_args"] == first["rendered_fields"][task]["application_args"]


def test_rerun_output_holds_no_secret(dag_test_stack, rerun):
    assert "Spark-Submit cmd" in rerun["output"]
    assert dag_test_stack.secret_key not in rerun["output"]
    assert dag_test_stack.secret_key not in json.dumps(rerun["summary"])


def test_rerun_reproduces_the_prepared_features_exactly(dag_test_stack, rerun):
    plan, before = rerun["summary"]["xcom"]["plan_run"], rerun["before"]
    after = committed_content(dag_test_stack, plan)
    assert after["features_attempt"] != before["features_attempt"]  # really re-written, in a new attempt
    assert after["metadata"] == before["metadata"]
    for split, table in before["splits"].items():
        assert table.num_rows > 0 and after["splits"][split].num_rows == table.num_rows
        assert after["splits"][split].equals(table), f"{split} split content differs after the re-run"


def test_each_output_holds_only_its_one_committed_attempt(dag_test_stack, rerun):
    plan, before = rerun["summary"]["xcom"]["plan_run"], rerun["before"]
    for name in OUTPUTS:
        manifest = dag_test_stack.read_json(f"{plan[name]}/_SUCCESS")
        attempt = f"{plan[name]}/{manifest['attempt']}"
        assert attempt != before[f"{name}_attempt"]
        committed = {f"{attempt}/{file}" for file in manifest["files"]}
        keys = [uri for uri in dag_test_stack.list_keys(plan[name])
                if not uri.startswith(f"{plan[name]}/checkpoints/")]  # train's resume state, outside attempts
        # pyarrow's S3 delete_dir (the commit's removal of the old attempt) leaves an empty `attempts/` directory
        # marker; no reader lists it as a file.
        markers = [uri for uri in keys if uri.endswith("/")]
        assert all(dag_test_stack.read_bytes(uri) == b"" for uri in markers), markers
        stored = set(keys) - set(markers)
        # No duplicates and no mixed files: the manifest and its attempt, nothing from the replaced attempt.
        assert stored == committed | {f"{plan[name]}/_SUCCESS"}, sorted(stored ^ committed)
        assert len(manifest["files"]) == len(set(manifest["files"])) > 0
    predict_summary = dag_test_stack.read_json(f"{plan['predictions']}/_SUCCESS")["summary"]
    assert predict_summary["features"] == committed_attempt(dag_test_stack, plan["features"])


def test_rerun_keeps_the_pinned_champion_byte_for_byte(dag_test_stack, first_run, rerun):
    plan, before = rerun["summary"]["xcom"]["plan_run"], rerun["before"]
    gate = rerun["summary"]["xcom"]["quality_gate"]
    pinned = first_run["summary"]["xcom"]["quality_gate"]["champion_model_uri"]
    assert gate["promoted"] is False and "re-run of the champion's run" in gate["reason"]
    assert gate["candidate_model_uri"] == committed_attempt(dag_test_stack, plan["model"]) != before["model_attempt"]
    assert dag_test_stack.read_bytes(plan["champion"]) == before["champion_bytes"]
    assert gate["champion_model_uri"] == pinned
    predict_args = rerun["summary"]["rendered_fields"]["predict"]["application_args"]
    assert predict_args[predict_args.index("--model") + 1] == pinned
    # The re-run's train commit removed the first model attempt; the champion's pinned copy is untouched.
    assert dag_test_stack.list_keys(before["model_attempt"]) == []
    assert f"{pinned}/model/model.h5" in dag_test_stack.list_keys(pinned)
    assert dag_test_stack.read_json(f"{pinned}/metrics.json") == before["model_metrics"]


def test_rerun_forecast_equals_the_first(dag_test_stack, rerun):
    """Same pinned model, identical features: the same forecast (to float32 inference round-off)."""
    forecast = rerun["summary"]["xcom"]["publish_forecast"]
    after = submission_sales(dag_test_stack, forecast["submission_uri"])
    assert sorted(after) == sorted(rerun["before"]["submission"])
    assert after == pytest.approx(rerun["before"]["submission"], rel=1e-5)
    assert forecast["model_uri"] == rerun["summary"]["xcom"]["quality_gate"]["champion_model_uri"]
    assert dag_test_stack.read_json(rerun["summary"]["xcom"]["plan_run"]["forecast_pointer"]) == forecast


def test_retraining_reproduces_the_model(rerun):
    """Shuffling is seeded per (seed, epoch, rank) and the initial weights and dropout per (seed, rank): a fresh
    re-train on identical features reproduces the model's score (bitwise in the train job's tests; here allowing
    float round-off)."""
    first = rerun["before"]["model_metrics"]
    again = rerun["summary"]["xcom"]["read_train_metrics"]
    assert again["model_attempt_uri"] != rerun["before"]["model_attempt"]  # really trained again
    assert again["best_val_exp_rmspe"] == pytest.approx(first["best_val_exp_rmspe"], rel=1e-4)
