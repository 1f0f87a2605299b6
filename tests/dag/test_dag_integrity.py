"""DAG integrity: it parses quickly without heavy imports, and its tasks, sensor, params and wiring are sound."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import timedelta

import pytest

from stack_helpers import DAG_ID, REPO_ROOT

HEAVY_MODULES = ("tensorflow", "pyspark", "horovod", "pandas", "numpy", "pyarrow", "keras", "matplotlib")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO_ROOT / "dags"))


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.dags[DAG_ID]


def test_dagbag_has_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert DAG_ID in dagbag.dags


def test_dag_file_parses_fast_without_heavy_imports():
    # A fresh interpreter, so modules imported by other tests or pytest plugins cannot hide a top-level import.
    probe = (
        "import json, sys, time\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "before = set(sys.modules)\n"
        f"bag = DagBag(dag_folder={str(REPO_ROOT / 'dags')!r})\n"
        "stat = bag.dagbag_stats[0]\n"
        f"print(json.dumps({{'errors': list(bag.import_errors), 'seconds': stat.duration.total_seconds(),"
        f" 'heavy': sorted(m for m in set(sys.modules) - before if m.split('.')[0] in {HEAVY_MODULES!r})}}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["errors"] == []
    assert report["heavy"] == []
    assert report["seconds"] < 5.0, f"parsing the DAG file took {report['seconds']:.2f} s"


def test_schedule_and_run_policy(dag):
    from airflow.sdk import CronDataIntervalTimetable

    assert isinstance(dag.timetable, CronDataIntervalTimetable)
    assert dag.timetable.expression in ("@daily", "0 0 * * *")
    assert dag.catchup is False
    assert 1 <= dag.max_active_runs <= 2
    assert dag.start_date.isoformat().startswith("2013-01-01")  # backfills may cover the whole history
    assert dag.doc_md and "quality gate" in dag.doc_md.lower()
    assert {"rossmann", "forecast"} <= set(dag.tags)
    assert dag.owner == "forecasting"


def test_task_graph(dag):
    upstream = {task.task_id: task.upstream_task_ids for task in dag.tasks}
    assert upstream["wait_for_raw_drop"] == {"plan_run"}
    assert "wait_for_raw_drop" in upstream["prepare_features"]
    assert {"plan_run", "prepare_features"} <= upstream["find_champion"]
    assert "find_champion" in upstream["train_model"]          # which runs after prepare_features
    assert "train_model" in upstream["backtest_season"] and "backtest_season" in upstream["read_train_metrics"]
    assert "read_train_metrics" in upstream["quality_gate"]
    assert "quality_gate" in upstream["predict"]
    assert "predict" in upstream["publish_forecast"]


def test_every_task_retries_with_backoff(dag):
    for task in dag.tasks:
        assert task.retries >= 1, task.task_id
        assert task.retry_exponential_backoff, task.task_id
        assert task.retry_delay >= timedelta(seconds=30), task.task_id
        assert task.execution_timeout is not None, task.task_id


def test_sensor_waits_for_the_marker_in_reschedule_mode_with_a_timeout(dag):
    sensor = dag.get_task("wait_for_raw_drop")
    assert sensor.mode == "reschedule"
    assert 0 < sensor.timeout <= 7 * 24 * 3600
    assert sensor.timeout_param == "raw_drop_timeout_s"
    assert sensor.aws_conn_id == "aws_default"


def test_spark_tasks_use_connections_and_pass_uris_only(dag):
    for task_id, job in (("prepare_features", "prepare.py"), ("train_model", "train.py"), ("predict", "predict.py")):
        task = dag.get_task(task_id)
        assert task._conn_id == "spark_default" and task.aws_conn_id == "aws_default"
        assert task.application.endswith(f"/rossmann_jobs/{job}")
        assert not task.env_vars, "credentials must not travel through templated env_vars"
        rendered_text = json.dumps(task.application_args, default=str)
        assert "AWS_" not in rendered_text and "secret" not in rendered_text.lower()
    prepare_args = dag.get_task("prepare_features").application_args
    assert prepare_args[prepare_args.index("--as-of") + 1] is not None  # bound to the plan's as_of (ds)


def test_every_spark_task_and_only_those_share_the_spark_pool(dag):
    from rossmann.pools import SPARK_POOL
    from rossmann.spark_submit import RossmannSparkSubmitOperator

    spark_tasks = {task.task_id for task in dag.tasks if isinstance(task, RossmannSparkSubmitOperator)}
    assert spark_tasks == {"prepare_features", "train_model", "backtest_season", "predict", "score_forecasts"}
    assert {task.task_id for task in dag.tasks if task.pool == SPARK_POOL} == spark_tasks
    assert all(dag.get_task(task_id).pool_slots == 1 for task_id in spark_tasks)


def test_every_task_alerts_on_its_final_failure_through_the_alerts_connection(dag):
    from rossmann.alerts import ALERTS_CONN_ID, Alert

    for task in dag.tasks:
        notifiers = [callback for callback in task.on_failure_callback or [] if isinstance(callback, Alert)]
        assert [notifier.conn_id for notifier in notifiers] == [ALERTS_CONN_ID], task.task_id
        assert not task.on_retry_callback, "a retried try must not alert"


def test_the_season_backtest_trains_the_days_recipe_cold_without_a_champion(dag):
    """Same training params as train_model, --season-backtest, and never a champion or a warm start: a champion was
    trained on data after the year-earlier origin."""
    args, train = dag.get_task("backtest_season").application_args, dag.get_task("train_model").application_args
    assert dag.get_task("backtest_season").application.endswith("/rossmann_jobs/train.py")
    assert "--season-backtest" in args and args[args.index("--features") + 1] == train[train.index("--features") + 1]
    for flag in ("--num-proc", "--epochs", "--batch-size", "--learning-rate", "--lr-schedule", "--hidden-units"):
        assert args[args.index(flag) + 1] == train[train.index(flag) + 1], flag
    assert not [arg for arg in args if str(arg).startswith(("--champion", "--warm-start"))]


def test_train_scores_the_champion_that_find_champion_resolved(dag):
    from airflow.sdk.definitions.xcom_arg import PlainXComArg

    args = dag.get_task("train_model").application_args
    champion = args[args.index("--champion-model") + 1]
    assert isinstance(champion, PlainXComArg) and champion.operator.task_id == "find_champion"
    assert champion.key == "champion_model_uri"              # one of find_champion's outputs; "" when none
    assert dag.get_task("find_champion").multiple_outputs


def test_forecast_asset_is_the_outlet_of_publish(dag):
    outlets = dag.get_task("publish_forecast").outlets
    assert [asset.name for asset in outlets] == ["rossmann_forecast"]
    assert outlets[0].uri.endswith("/forecast/latest.json")


def test_default_params_validate(dag):
    params = dag.params.validate()
    assert params["as_of"] is None
    assert params["num_proc"] >= 1 and params["epochs"] >= 1
    assert 0 < params["sample_rate"] <= 1


@pytest.mark.parametrize("name, value", [
    ("sample_rate", 0), ("sample_rate", 1.5), ("epochs", 0), ("num_proc", "two"), ("batch_size", -1),
    ("learning_rate", 0), ("promotion_tolerance", 2.0), ("raw_drop_timeout_s", 1), ("as_of", "yesterday"),
    ("as_of", "2015-02-30"), ("baseline_tolerance", -0.1), ("baseline_tolerance", 1.5),
    ("lr_schedule", "linear"), ("warm_start", "yes"), ("warm_start_epochs", 0),
])
def test_invalid_params_are_rejected(dag, name, value):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        copy.deepcopy(dag.params.get_param(name)).resolve(value)


@pytest.mark.parametrize("name, value", [("as_of", "2015-06-30"), ("sample_rate", 0.05), ("num_proc", 4),
                                         ("promotion_tolerance", -0.1), ("baseline_tolerance", 0.25),
                                         ("lr_schedule", "cosine"), ("warm_start", False), ("warm_start_epochs", 1)])
def test_valid_param_overrides_are_accepted(dag, name, value):
    assert copy.deepcopy(dag.params.get_param(name)).resolve(value) == value


def test_train_gets_every_hyperparameter_param_and_the_defaults_are_the_train_jobs(dag):
    import importlib.util

    args = dag.get_task("train_model").application_args
    for flag, param in (("--num-proc", "num_proc"), ("--epochs", "epochs"), ("--batch-size", "batch_size"),
                        ("--learning-rate", "learning_rate"), ("--hidden-units", "hidden_units"),
                        ("--lr-schedule", "lr_schedule"), ("--warm-start-epochs", "warm_start_epochs")):
        assert args[args.index(flag) + 1] == "{{ params.%s }}" % param, flag
    # The train job's own defaults, the measured best (rossmann_jobs is not installed in the Airflow env: load the
    # module by path). A scheduled run must train what bench/RESULTS.md measured, not an older setting.
    spec = importlib.util.spec_from_file_location("train_params", REPO_ROOT / "rossmann_jobs/model/params.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    defaults, job = dag.params.validate(), module.TrainParams()
    assert tuple(int(units) for units in defaults["hidden_units"].split(",")) == job.hidden_units
    assert (defaults["epochs"], defaults["batch_size"], defaults["learning_rate"], defaults["lr_schedule"]) == (
        job.epochs, job.batch_size, job.learning_rate, job.lr_schedule)


def test_train_warm_starts_from_the_champion_that_find_champion_resolved(dag):
    from airflow.sdk.definitions.xcom_arg import PlainXComArg

    args = dag.get_task("train_model").application_args
    warm = args[args.index("--warm-start-model") + 1]
    assert isinstance(warm, PlainXComArg) and warm.operator.task_id == "find_champion"
    assert warm.key == "warm_start_model_uri"             # "" without a champion or with warm_start off
    assert dag.params.validate()["warm_start"] is True
