"""The whole DAG through `airflow dags test` on the embedded stack: real moto S3 server, real spark-submit of the
prepare/train/predict/score jobs, 2 Horovod processes, realistic daily drops (only what is known on each date).
One run per logical date feeds many assertions: the first run (2015-07-31), then a backfill of the two days
before it in date order (a rolling-origin backtest: each forecast must use a model trained on data up to its own
date, never the later first run's champion, and each run scores the earlier days' forecasts against its drop's
actuals); then the first run is cleared and every task of it re-run in place (idempotency)."""
from __future__ import annotations

import csv
import datetime
import html
import io
import json
import math
import os
import subprocess
import urllib.request

import pytest

from rossmann_jobs.model.trust import sha256_hex
from rossmann_jobs.output_layout import MODEL_FILES
from stack_helpers import (
    AIRFLOW_PYTHON,
    DAG_ID,
    FIRST_DATE,
    FIRST_RUN_CONF,
    JOBS_PYTHON,
    REPO_ROOT,
    SCORING_TASKS,
    SMALL_RUN_CONF,
    SMALL_STORES,
    TASKS,
    embedded,
    run_dag,
)

pytestmark = pytest.mark.slow

# The two days before FIRST_DATE, run after it: with it, three consecutive as-of dates. Its in-place re-run (below)
# then scores both backfilled forecasts against its drop.
BACKFILL_DATES = ["2015-07-29", "2015-07-30"]
# On the middle day a negative tolerance demands a 99 % improvement: the gate must keep the champion as of that day.
# That run also warm-starts from the champion as of its date.
KEEP_CHAMPION_DATE = BACKFILL_DATES[1]
# SMALL_RUN_CONF trains for 6 epochs (FIRST_RUN_CONF 12): a model that learns is far below this (an untrained or
# saturated one is around 1 or above).
LEARNED_VAL_EXP_RMSPE = 0.5


@pytest.fixture(scope="module")
def backfill_runs(dag_test_stack, first_run):
    """The days before the first run, in date order, like `airflow backfill create` with one active run."""
    runs = {}
    for day in BACKFILL_DATES:
        # That day also starts from the champion as of it (the first backfill day's model) and fine-tunes it.
        settings = {"promotion_tolerance": -0.99, "warm_start": True} if day == KEEP_CHAMPION_DATE else {}
        runs[day] = run_dag(dag_test_stack, day, {**SMALL_RUN_CONF, **settings})
    return runs


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
    # The stack's first run: no earlier forecast to score, so the short-circuit skips the scoring tasks.
    assert {task: info["state"] for task, info in tasks.items() if task in SCORING_TASKS} == {
        task: "skipped" for task in SCORING_TASKS}
    assert all("success" in info["state"] for task, info in tasks.items() if task not in SCORING_TASKS), tasks
    assert first_run["summary"]["xcom"].get("find_forecasts_to_score") is None


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
    assert metrics["horovod_size"] == stored["horovod_size"] == FIRST_RUN_CONF["num_proc"]
    assert 1 <= metrics["epochs_run"] <= FIRST_RUN_CONF["epochs"]
    assert metrics["samples_per_s"] > 0
    assert metrics["model_uri"] == plan["model"]
    keys = dag_test_stack.list_keys(attempt)
    assert f"{attempt}/model/weights.npz" in keys and f"{attempt}/model/artifact.json" in keys


def test_first_model_becomes_champion(dag_test_stack, first_run):
    xcom = first_run["summary"]["xcom"]
    plan, metrics, gate = xcom["plan_run"], xcom["read_train_metrics"], xcom["quality_gate"]
    assert gate["promoted"] is True and gate["champion_val_exp_rmspe"] is None
    assert gate["candidate_val_exp_rmspe"] == pytest.approx(metrics["gate_scores"]["challenger"])
    # A model that learned, and beat the naive seasonal baseline on the same validation rows.
    assert gate["candidate_val_exp_rmspe"] < LEARNED_VAL_EXP_RMSPE
    assert gate["baseline_tolerance"] == SMALL_RUN_CONF["baseline_tolerance"]
    assert gate["candidate_val_exp_rmspe"] < gate["baseline_val_exp_rmspe"] * (1 + gate["baseline_tolerance"])
    assert gate["validation_rows"] > 0 and gate["champion_as_of"] == FIRST_DATE
    assert "quality gate:" in first_run["output"] and "PROMOTED" in first_run["output"]
    # The champion is pinned: an immutable copy of exactly the committed attempt's files, which predict uses.
    attempt = committed_attempt(dag_test_stack, plan["model"])
    assert gate["candidate_model_uri"] == metrics["model_attempt_uri"] == attempt
    pinned = f"{plan['champion_models']}/{attempt.rsplit('/', 1)[-1]}"
    assert gate["champion_model_uri"] == pinned
    manifest = dag_test_stack.read_json(f"{plan['model']}/_SUCCESS")
    assert dag_test_stack.list_keys(pinned) == sorted(f"{pinned}/{name}" for name in manifest["files"])
    assert (dag_test_stack.read_bytes(f"{pinned}/model/weights.npz")
            == dag_test_stack.read_bytes(f"{attempt}/model/weights.npz"))
    champion = dag_test_stack.read_json(plan["champion"])
    assert champion["model_uri"] == pinned and champion["source_model_uri"] == attempt
    assert champion["val_exp_rmspe"] == pytest.approx(metrics["best_val_exp_rmspe"])
    predict_args = first_run["summary"]["rendered_fields"]["predict"]["application_args"]
    assert predict_args[predict_args.index("--model") + 1] == pinned
    # The record holds the SHA-256 of the pinned model files, and predict loads the champion only as recorded.
    assert champion["model_sha256"] == {name: sha256_hex(dag_test_stack.read_bytes(f"{pinned}/{name}"))
                                        for name in MODEL_FILES}
    assert json.loads(predict_args[predict_args.index("--model-sha256") + 1]) == champion["model_sha256"]


def test_forecast_is_published_with_submission_and_report(dag_test_stack, first_run):
    xcom = first_run["summary"]["xcom"]
    plan, forecast = xcom["plan_run"], xcom["publish_forecast"]
    attempt = committed_attempt(dag_test_stack, plan["predictions"])
    # Published as a copy of the committed attempt under forecast/published/ (Airflow's prefix), hashed.
    published = f"{plan['forecast_published']}/{attempt.rsplit('/', 1)[-1]}"
    assert forecast["source_attempt_uri"] == attempt and forecast["published_uri"] == published
    assert forecast["submission_uri"] == f"{published}/submission.csv"
    assert forecast["report_uri"] == f"{published}/report/index.html"
    assert dag_test_stack.read_json(plan["forecast_pointer"]) == forecast
    assert forecast["forecast_sha256"] == {
        name: sha256_hex(dag_test_stack.read_bytes(f"{published}/{name}"))
        for name in dag_test_stack.read_json(f"{plan['predictions']}/_SUCCESS")["files"]}

    raw_test = list(csv.DictReader(io.StringIO(dag_test_stack.read_bytes(f"{plan['raw']}/test.csv").decode())))
    submission = list(csv.DictReader(io.StringIO(dag_test_stack.read_bytes(forecast["submission_uri"]).decode())))
    assert list(submission[0]) == ["Id", "Sales"]
    assert sorted(int(row["Id"]) for row in submission) == sorted(int(row["Id"]) for row in raw_test)
    closed = {row["Id"] for row in raw_test if row["Open"] == "0"}
    assert all(float(row["Sales"]) == 0 for row in submission if row["Id"] in closed)
    assert all(float(row["Sales"]) > 0 for row in submission if row["Id"] not in closed)
    assert forecast["forecast_val_exp_rmspe"] > 0


def test_the_report_is_one_page_that_opens_from_the_task_link_and_the_log(dag_test_stack, first_run):
    """The predict task's "Forecast report" extra link carries a presigned URL that opens the committed report
    without credentials; the page embeds its plots, the gate comparison of this run and the training curves."""
    forecast = first_run["summary"]["xcom"]["publish_forecast"]
    gate = first_run["summary"]["xcom"]["quality_gate"]
    attempt = forecast["report_uri"].rsplit("/report/", 1)[0]
    assert dag_test_stack.list_keys(f"{attempt}/report") == [forecast["report_uri"]], "one self-contained file"
    page = dag_test_stack.read_bytes(forecast["report_uri"])
    link = first_run["summary"]["links"]["predict"]
    assert link.startswith("http") and "X-Amz-Signature=" in link
    with urllib.request.urlopen(link, timeout=30) as response:   # no credentials: the signature is the access
        assert response.read() == page
    text = page.decode()
    assert text.count('<img src="data:image/png;base64,') == text.count("<img ") >= 5
    assert "Model selection (quality gate)" in text and "Training curves" in text
    assert html.escape(gate["reason"]) in text


def test_the_forecast_beats_the_naive_baseline_against_the_generators_truth(dag_test_stack, first_run):
    """Scored against the hidden sales of the horizon (not the validation rows that chose the model), with the
    product's own scorer (`python -m rossmann_jobs.synth score`): a model that learned forecasts the 48 days better
    than the store x weekday x promo median, and stays within reach of the point-in-time floor."""
    plan = first_run["summary"]["xcom"]["plan_run"]
    env = {**os.environ, **embedded.aws_env(dag_test_stack.state, dag_test_stack.endpoint)}
    done = subprocess.run([str(JOBS_PYTHON), "-m", "rossmann_jobs.synth", "score", "--stores", str(SMALL_STORES),
                           "--seed", "7", "--as-of", FIRST_DATE, "--raw", plan["raw"],
                           "--predictions", plan["predictions"]],
                          env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    scores = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"against the truth: model {scores['model']:.4f}, naive baseline {scores['baseline']:.4f}, "
          f"point-in-time floor {scores['point_in_time_floor']:.4f}, noise floor {scores['noise_floor']:.4f} "
          f"({scores['rows']} rows)")
    assert scores["rows"] > 0
    assert scores["noise_floor"] < scores["point_in_time_floor"] and 0 < scores["model"] < scores["baseline"]


def test_forecast_asset_event_is_emitted(first_run):
    forecast = first_run["summary"]["xcom"]["publish_forecast"]
    events = first_run["summary"]["asset_events"]
    assert [event["name"] for event in events] == ["rossmann_forecast"]
    assert events[0]["extra"]["submission_uri"] == forecast["submission_uri"]


def test_presigned_urls_reach_only_the_extra_link(first_run):
    """A presigned URL is a bearer credential: no task log and no task's XCom value holds one; the report link's own
    XCom does (the negative control: a logged one would be found the same way)."""
    output = first_run["output"]
    assert "forecast report (one self-contained page)" in output   # publish_forecast's log is among those searched
    assert "X-Amz-Signature" not in output and "X-Amz-Credential" not in output
    assert "X-Amz-Signature" not in json.dumps(first_run["summary"]["xcom"])
    assert "X-Amz-Signature=" in first_run["summary"]["links"]["predict"]


def test_s3_secret_never_reaches_logs_xcom_or_rendered_fields(dag_test_stack, first_run):
    secret = dag_test_stack.secret_key
    assert len(secret) > 20
    # `airflow dags test` runs tasks in-process and writes no task log files: its output is the task logs.
    output = first_run["output"]
    assert "Spark-Submit cmd" in output  # the logs we search do include the spark-submit output
    assert secret not in output
    assert secret not in json.dumps(first_run["summary"])  # XCom and every task's rendered template fields
    lineage_events = dag_test_stack.state.lineage_events.read_text()
    assert '"eventType": "COMPLETE"' in lineage_events and secret not in lineage_events   # the operators' facets
    # Horovod's per-run key travels to the workers in _HOROVOD_SECRET_KEY: no environment dump may show it.
    assert "epoch 1/" in output  # the Horovod ranks' output is in what we searched
    assert "_HOROVOD_SECRET_KEY" not in output


def test_every_run_trains_only_on_data_up_to_its_as_of_date(dag_test_stack, first_run, backfill_runs):
    for as_of, run in {FIRST_DATE: first_run, **backfill_runs}.items():
        plan = run["summary"]["xcom"]["plan_run"]
        attempt = committed_attempt(dag_test_stack, plan["features"])
        train_dates = parquet_dates(dag_test_stack, f"{attempt}/train")
        validation_dates = parquet_dates(dag_test_stack, f"{attempt}/validation")
        test_dates = parquet_dates(dag_test_stack, f"{attempt}/test")
        # Max date equals as_of: the realistic drop holds sales up to as_of, and the cut-off is exact.
        assert max(train_dates + validation_dates)[:10] == as_of
        # The horizon is the drop's plan: the 48 days after as_of.
        assert min(test_dates)[:10] > as_of and len({day[:10] for day in test_dates}) == 48
        metadata = dag_test_stack.read_json(f"{attempt}/metadata.json")
        assert metadata["as_of"] == as_of and metadata["point_in_time"]["mode"] == "strict"


def model_as_of(stack, model_attempt_uri: str) -> str:
    """The as-of date of the data a model was trained on: its artifact names the features it was trained with."""
    artifact = stack.read_json(f"{model_attempt_uri}/model/artifact.json")
    features = artifact["features_uri"].replace("s3a://", "s3://").rstrip("/")
    if "/attempts/" not in features:
        features = committed_attempt(stack, features)
    return stack.read_json(f"{features}/metadata.json")["as_of"]


def test_each_backfilled_forecast_uses_a_model_trained_up_to_its_own_date(dag_test_stack, first_run, backfill_runs):
    later_champion = first_run["summary"]["xcom"]["quality_gate"]["champion_model_uri"]
    for day, run in backfill_runs.items():
        xcom = run["summary"]["xcom"]
        gate = xcom["quality_gate"]
        predict_args = run["summary"]["rendered_fields"]["predict"]["application_args"]
        model = predict_args[predict_args.index("--model") + 1]
        assert model == gate["champion_model_uri"] == xcom["publish_forecast"]["model_uri"]
        assert model != later_champion, f"{day} forecast with the champion of the later date {FIRST_DATE}"
        assert gate["champion_as_of"] <= day and model_as_of(dag_test_stack, model) <= day
    # The first backfill day: a champion exists (as of FIRST_DATE) but is later, so there is none as of that day.
    first_day = backfill_runs[BACKFILL_DATES[0]]["summary"]["xcom"]
    assert first_day["find_champion"]["champion_model_uri"] == ""
    assert first_day["quality_gate"]["promoted"] is True
    assert model_as_of(dag_test_stack, first_day["quality_gate"]["champion_model_uri"]) == BACKFILL_DATES[0]


def test_gate_keeps_the_champion_as_of_its_date_when_the_new_model_is_not_good_enough(dag_test_stack, first_run,
                                                                                     backfill_runs):
    previous = backfill_runs[BACKFILL_DATES[0]]["summary"]["xcom"]["quality_gate"]
    xcom = backfill_runs[KEEP_CHAMPION_DATE]["summary"]["xcom"]
    gate, metrics, found = xcom["quality_gate"], xcom["read_train_metrics"], xcom["find_champion"]
    assert found["champion_model_uri"] == previous["champion_model_uri"]
    assert found["champion_as_of"] == BACKFILL_DATES[0]
    # The champion was scored on this run's own validation rows, not taken from its record.
    scores = metrics["gate_scores"]
    assert scores["champion_model_uri"] == previous["champion_model_uri"]
    assert gate["champion_val_exp_rmspe"] == pytest.approx(scores["champion"])
    assert gate["validation_rows"] == scores["validation_rows"] > 0
    assert gate["threshold"] == pytest.approx(scores["champion"] * 0.01)
    assert gate["promoted"] is False and " > " in gate["reason"]
    assert gate["champion_model_uri"] == previous["champion_model_uri"]
    assert gate["champion_as_of"] == BACKFILL_DATES[0]
    # Both models learned (within the run's allowance of the naive baseline, on the same rows).
    assert scores["champion"] < LEARNED_VAL_EXP_RMSPE and scores["challenger"] < LEARNED_VAL_EXP_RMSPE
    assert 0 < scores["baseline"] < LEARNED_VAL_EXP_RMSPE


def test_a_warm_started_run_fine_tunes_the_champion_as_of_its_date(dag_test_stack, backfill_runs):
    xcom = backfill_runs[KEEP_CHAMPION_DATE]["summary"]["xcom"]
    found, metrics = xcom["find_champion"], xcom["read_train_metrics"]
    assert found["warm_start_model_uri"] == found["champion_model_uri"] != ""
    assert found["champion_as_of"] <= KEEP_CHAMPION_DATE                 # never a model trained on later data
    assert model_as_of(dag_test_stack, found["warm_start_model_uri"]) <= KEEP_CHAMPION_DATE
    assert metrics["warm_start"] == {"used": True, "requested": found["warm_start_model_uri"], "reason": None}
    args = backfill_runs[KEEP_CHAMPION_DATE]["summary"]["rendered_fields"]["train_model"]["application_args"]
    assert args[args.index("--warm-start-model") + 1] == found["warm_start_model_uri"]
    # A fine-tune of a model that had learned: it trains the warm-start epochs and still learns.
    committed = dag_test_stack.read_json(metrics["metrics_uri"])
    assert committed["epochs_run"] == int(args[args.index("--warm-start-epochs") + 1]) < SMALL_RUN_CONF["epochs"]
    # Its first epoch starts from a model that had learned: better than the cold start of the day before after one.
    cold = backfill_runs[BACKFILL_DATES[0]]["summary"]["xcom"]["read_train_metrics"]
    assert cold["warm_start"]["used"] is False
    cold_first_epoch = dag_test_stack.read_json(cold["metrics_uri"])["epochs"][0]["val_exp_rmspe"]
    print(f"val exp_rmspe after epoch 1: warm {committed['epochs'][0]['val_exp_rmspe']:.4f}, "
          f"cold {cold_first_epoch:.4f}")
    assert committed["epochs"][0]["val_exp_rmspe"] < cold_first_epoch
    assert committed["best_val_exp_rmspe"] < LEARNED_VAL_EXP_RMSPE


def test_backfill_keeps_the_latest_forecast_and_champion_pointers(dag_test_stack, first_run, backfill_runs):
    """Backfilled days commit and report their forecasts, but latest.json and champion.json keep the newer date's."""
    latest = first_run["summary"]["xcom"]["publish_forecast"]
    plan = first_run["summary"]["xcom"]["plan_run"]
    assert dag_test_stack.read_json(plan["forecast_pointer"]) == latest and latest["as_of"] == FIRST_DATE
    assert dag_test_stack.read_json(plan["champion"])["as_of"] == FIRST_DATE
    history = dag_test_stack.list_keys(plan["champion_history"])
    assert f"{plan['champion_history']}/{FIRST_DATE}.json" in history
    assert f"{plan['champion_history']}/{BACKFILL_DATES[0]}.json" in history
    assert f"{plan['champion_history']}/{KEEP_CHAMPION_DATE}.json" not in history
    for day, run in backfill_runs.items():
        forecast = run["summary"]["xcom"]["publish_forecast"]
        assert forecast["as_of"] == day and dag_test_stack.read_bytes(forecast["submission_uri"])
        events = {event["name"]: event["extra"] for event in run["summary"]["asset_events"]}
        assert (events["rossmann_forecast"]["as_of"], events["rossmann_forecast"]["latest"]) == (day, False)
    assert first_run["summary"]["asset_events"][0]["extra"]["latest"] is True


def exp_rmspe_by_hand(stack, forecast_run: dict, scoring_run: dict) -> tuple[float, int, set[int], float]:
    """The forecast's exp-RMSPE against the scoring drop's actual sales, from the raw CSV files alone, and how far
    the two-decimal rounding of submission.csv can move it: the scorer reads the unrounded predictions, and a
    forecast off by at most 0.005 moves each percentage error, hence the root mean square, by at most 0.005 / the
    smallest actual."""
    forecast_plan, scoring_plan = (run["summary"]["xcom"]["plan_run"] for run in (forecast_run, scoring_run))
    plan_rows = csv.DictReader(io.StringIO(stack.read_bytes(f"{forecast_plan['raw']}/test.csv").decode()))
    key_of = {int(row["Id"]): (int(row["Store"]), row["Date"]) for row in plan_rows}
    forecast = {key_of[Id]: sales for Id, sales in
                submission_sales(stack, forecast_run["summary"]["xcom"]["publish_forecast"]["submission_uri"]).items()}
    actual_rows = csv.DictReader(io.StringIO(stack.read_bytes(f"{scoring_plan['raw']}/train.csv").decode()))
    errors, leads, smallest_actual = [], set(), math.inf
    for row in actual_rows:
        key = (int(row["Store"]), row["Date"])
        if key in forecast and forecast_plan["as_of"] < row["Date"] <= scoring_plan["as_of"] and int(row["Sales"]) > 0:
            errors.append(((int(row["Sales"]) - forecast[key]) / int(row["Sales"])) ** 2)
            smallest_actual = min(smallest_actual, int(row["Sales"]))
            leads.add((datetime.date.fromisoformat(row["Date"]) -
                       datetime.date.fromisoformat(forecast_plan["as_of"])).days)
    return math.sqrt(sum(errors) / len(errors)), len(errors), leads, 0.005 / smallest_actual


def check_scores(stack, forecast_run: dict, scoring_run: dict) -> dict:
    """The scoring record of forecast_run made with scoring_run's drop, checked against a computation by hand."""
    forecast_day = forecast_run["summary"]["xcom"]["plan_run"]["as_of"]
    scoring_day = scoring_run["summary"]["xcom"]["plan_run"]["as_of"]
    scores_root = scoring_run["summary"]["xcom"]["plan_run"]["scores"]
    key = forecast_run["summary"]["xcom"]["plan_run"]["features"].split("/")[-2]
    record = stack.read_json(f"{scores_root}/{forecast_day}/{key}/{scoring_day}.json")
    by_hand, rows, leads, rounding = exp_rmspe_by_hand(stack, forecast_run, scoring_run)
    assert record["status"] == "scored" and record["overall"]["rows"] == rows > 0
    # The record keeps 8 decimals (score_records.DIGITS); the rest of the gap is submission.csv's rounding.
    assert record["overall"]["model_exp_rmspe"] == pytest.approx(by_hand, abs=rounding + 1e-8)
    assert {row["lead_day"] for row in record["by_lead_day"]} == leads
    assert leads == set(range(1, (datetime.date.fromisoformat(scoring_day)
                                  - datetime.date.fromisoformat(forecast_day)).days + 1))
    assert 0 < record["overall"]["baseline_exp_rmspe"] < 1
    assert {row["store"] for row in record["by_store"]}
    return record


def test_each_run_scores_the_earlier_forecasts_against_its_actuals(dag_test_stack, backfill_runs):
    first_day, second_day = (backfill_runs[day] for day in BACKFILL_DATES)
    # The first backfill day has no earlier forecast (FIRST_DATE's is later): nothing to score.
    assert first_day["summary"]["tasks"]["score_forecasts"]["state"] == "skipped"
    assert second_day["summary"]["tasks"]["score_forecasts"]["state"] == "success"
    check_scores(dag_test_stack, first_day, second_day)
    summary = second_day["summary"]["xcom"]["publish_scores"]
    assert summary["forecasts_scored"] == 1 and summary["rows"] > 0
    events = {event["name"]: event["extra"] for event in second_day["summary"]["asset_events"]}
    assert events["rossmann_forecast_scores"] == summary
    report = second_day["summary"]["xcom"]["plan_run"]["scores_report"]
    assert b"data:image/png;base64," in dag_test_stack.read_bytes(report)


# --- Idempotency: clear the first run and re-run every task of it in place ----------------------------------------
# A second `airflow dags test` of the same date would not do: Airflow 3.3.2's DAG.test() deletes the date's run and
# creates a new one whose run id comes from the wall clock (manual__<now>), i.e. new run-scoped prefixes. So the
# fixture does what an operator does: `airflow tasks clear` the run, then runs each task again in DAG order with
# `airflow tasks test <dag> <task> <run id>` (which, in Airflow 3, records the task state and XCom of that run); the
# fixture's script runs those CLI commands in one process.
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
    """`airflow tasks clear` every task of the run, then run each again in DAG order (rerun_in_place.py: the CLI's
    own commands in one process; Airflow's start-up cost ~15 s of CPU per command here); returns their output."""
    ran = subprocess.run([str(AIRFLOW_PYTHON), str(REPO_ROOT / "tests" / "dag" / "rerun_in_place.py"), DAG_ID, run_id,
                          FIRST_DATE, json.dumps(TASKS), json.dumps(task_params)], env=stack.process_env(),
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=3000)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, f"the re-run failed:\n{output[-6000:]}"
    assert output.count("== re-run of ") == len(TASKS), output[-6000:]
    return output


@pytest.fixture(scope="module")
def rerun(dag_test_stack, first_run, backfill_runs):
    # After the backfill: the re-run's scoring branch then has the backfilled days' forecasts to score.
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
    # The same job arguments, predict's --model (the kept champion) included. Train's --champion-model is the
    # champion as of the date: none at the first run, the first run's own pinned model now; predict's
    # --gate-decision (for the report) is each run's own gate reason.
    def without(args: list[str], flag: str) -> list[str]:
        return args[:args.index(flag)] + args[args.index(flag) + 2:]

    def value(args: list[str], flag: str) -> str:
        return args[args.index(flag) + 1]

    first_args, again_args = ({task: run["rendered_fields"][task]["application_args"] for task in
                               ("prepare_features", "train_model", "predict")} for run in (first, again))
    assert again_args["prepare_features"] == first_args["prepare_features"]
    assert without(again_args["predict"], "--gate-decision") == without(first_args["predict"], "--gate-decision")
    for run, args in ((first, first_args), (again, again_args)):
        assert value(args["predict"], "--gate-decision") == run["xcom"]["quality_gate"]["reason"]
    # ... and with it the champion record's digests of its files, for scoring and for a warm start.
    champion_flags = ("--champion-model", "--champion-model-sha256", "--warm-start-model-sha256")

    def without_champion(args: list[str]) -> list[str]:
        for flag in champion_flags:
            args = without(args, flag)
        return args

    assert without_champion(again_args["train_model"]) == without_champion(first_args["train_model"])
    assert [value(first_args["train_model"], flag) for flag in champion_flags] == ["", "", ""]
    assert value(again_args["train_model"], "--champion-model") == first["xcom"]["quality_gate"]["champion_model_uri"]
    digests = json.loads(value(again_args["train_model"], "--champion-model-sha256"))
    assert set(digests) == {"model/artifact.json", "model/weights.npz"}
    assert all(len(digest) == 64 for digest in digests.values())
    assert value(again_args["train_model"], "--warm-start-model-sha256") == \
        value(again_args["train_model"], "--champion-model-sha256")


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
    assert f"{pinned}/model/weights.npz" in dag_test_stack.list_keys(pinned)
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


def test_rerun_scores_both_backfilled_forecasts_against_its_drop(dag_test_stack, backfill_runs, rerun):
    """The re-run of FIRST_DATE comes after the backfill: its scoring branch scores the two earlier forecasts."""
    rerun_view = {"summary": rerun["summary"]}
    for day in BACKFILL_DATES:
        check_scores(dag_test_stack, backfill_runs[day], rerun_view)
    summary = rerun["summary"]["xcom"]["publish_scores"]
    assert summary["forecasts_scored"] == len(BACKFILL_DATES) and summary["rows"] > 0


# --- always a forecast: the naive seasonal fallback, through the DAG --------------------------------------------

FALLBACK_DATE = "2015-07-27"   # before every other run's date: its forecast is scored by none of them


@pytest.fixture(scope="module")
def fallback_run(dag_test_stack, rerun):
    """After the other runs: a date where no network may forecast (season_tolerance -1 refuses the network on the
    season backtest whatever it scores), with the alerts connection pointed at a local sink."""
    from stack_helpers import AlertSink

    sink = AlertSink()
    try:
        run = run_dag(dag_test_stack, FALLBACK_DATE, {**SMALL_RUN_CONF, "epochs": 1, "season_tolerance": -1.0},
                      extra_env=sink.connection_env)
    finally:
        sink.stop()
    return {**run, "alerts": list(sink.received)}


def test_a_run_no_model_may_forecast_publishes_the_naive_fallback_marked_and_alerted(dag_test_stack, fallback_run):
    import pyarrow.parquet as pq

    xcom = fallback_run["summary"]["xcom"]
    gate, published, plan = xcom["quality_gate"], xcom["publish_forecast"], xcom["plan_run"]
    assert gate["promoted"] is False and gate["forecast_model"] == "naive-seasonal"
    assert gate["season_backtest"]["available"] is True and gate["season_backtest"]["passed"] is False
    assert "no network forecasts as of 2015-07-27" in gate["fallback_reason"]
    predict_args = fallback_run["summary"]["rendered_fields"]["predict"]["application_args"]
    assert predict_args[predict_args.index("--model") + 1] == ""
    predict = dag_test_stack.read_json(f"{plan['predictions']}/_SUCCESS")["summary"]
    assert predict["forecast_model"] == "naive-seasonal"
    # Published and registered like any forecast, marked; latest.json keeps the newest date's (a backfill).
    assert published["forecast_model"] == "naive-seasonal" and published["fallback_reason"] == gate["fallback_reason"]
    record = dag_test_stack.read_json(plan["forecast_record"])
    assert record["forecast_model"] == "naive-seasonal" and record["fallback_reason"] == gate["fallback_reason"]
    assert dag_test_stack.read_json(plan["forecast_pointer"])["as_of"] == FIRST_DATE
    # The forecast is the naive seasonal baseline on every open row, and the submission is that forecast.
    rows = [pq.read_table(io.BytesIO(dag_test_stack.read_bytes(uri))).to_pandas()
            for uri in dag_test_stack.list_keys(published["predictions_uri"])
            if uri.endswith(".parquet") and "split=test" in uri]
    test = __import__("pandas").concat(rows, ignore_index=True)
    open_rows = test[test["OpenStatus"] != "closed"]
    assert len(open_rows) > 0
    assert open_rows["SalesForecast"].tolist() == pytest.approx(open_rows["SalesBaseline"].tolist(), rel=1e-5)
    sales = submission_sales(dag_test_stack, published["submission_uri"])
    assert {int(i): s for i, s in zip(open_rows["Id"], open_rows["SalesForecast"])} == pytest.approx(
        {int(i): sales[int(i)] for i in open_rows["Id"]}, rel=1e-5)
    report = dag_test_stack.read_bytes(published["report_uri"]).decode()
    assert "naive seasonal fallback" in report
    fallback_alerts = [alert for alert in fallback_run["alerts"] if alert.get("alert") == "rossmann forecast fallback"]
    assert len(fallback_alerts) == 1 and fallback_alerts[0]["as_of"] == FALLBACK_DATE
    assert fallback_alerts[0]["fallback_reason"] == gate["fallback_reason"]
