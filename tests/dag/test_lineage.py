"""Lineage datasets: every URI a Spark task hands its job is reported as an input or an output, named as the
OpenLineage S3 convention names it; a Python task's reads and writes reach the hook lineage collector. (The events
of a whole DAG run are read in tests/dag/test_dag_e2e.py.)"""
from __future__ import annotations

import pytest

from rossmann import lineage
from stack_helpers import DAG_ID, REPO_ROOT

# Arguments of the jobs that are not datasets: a date, digests of files that are datasets, the gate's reason text.
NOT_DATASET_FLAGS = {"--as-of", "--champion-model-sha256", "--warm-start-model-sha256", "--model-sha256",
                     "--gate-decision"}


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO_ROOT / "dags")).dags[DAG_ID]


def test_every_uri_a_spark_task_passes_is_a_lineage_input_or_output(dag):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    spark_tasks = [task for task in dag.tasks if isinstance(task, SparkSubmitOperator)]
    assert {task.task_id for task in spark_tasks} == {"prepare_features", "train_model", "backtest_season",
                                                     "predict", "score_forecasts"}
    known = set(lineage.JOB_INPUT_FLAGS) | set(lineage.JOB_OUTPUT_FLAGS) | NOT_DATASET_FLAGS
    for task in spark_tasks:
        args = task.application_args
        # A value from another task's XCom (the plan's URIs, the champion, the gate) follows its flag.
        from_xcom = [args[index - 1] for index, arg in enumerate(args) if not isinstance(arg, str)]
        assert from_xcom and set(from_xcom) <= known, (task.task_id, sorted(set(from_xcom) - known))
        assert sum(flag in lineage.JOB_OUTPUT_FLAGS for flag in args) == 1, task.task_id


def test_job_datasets_follow_the_flags_and_skip_empty_values():
    args = ["--features", "s3a://b/runs/2015-07-31/k/features/", "--out", "s3://b/runs/2015-07-31/k/model",
            "--champion-model", "", "--warm-start-model", "", "--epochs", "12", "--num-proc", "2",
            "--trained-model", "s3://b/runs/2015-07-31/k/model"]
    inputs, outputs = lineage.job_datasets(args)
    assert inputs == ["s3a://b/runs/2015-07-31/k/features/", "s3://b/runs/2015-07-31/k/model"]
    assert outputs == ["s3://b/runs/2015-07-31/k/model"]
    facets = lineage.operator_lineage(inputs, outputs)
    assert [(d.namespace, d.name) for d in facets.inputs] == [("s3://b", "runs/2015-07-31/k/features"),
                                                              ("s3://b", "runs/2015-07-31/k/model")]
    assert [(d.namespace, d.name) for d in facets.outputs] == [("s3://b", "runs/2015-07-31/k/model")]


def test_the_operator_reports_its_rendered_arguments(dag):
    task = dag.get_task("prepare_features")
    task.application_args = ["--raw", "s3://b/raw/2015-07-31", "--out", "s3://b/runs/2015-07-31/k/features",
                             "--as-of", "2015-07-31"]
    facets = task.get_openlineage_facets_on_complete(None)
    assert [d.name for d in facets.inputs] == ["raw/2015-07-31"]
    assert [d.name for d in facets.outputs] == ["runs/2015-07-31/k/features"]


@pytest.mark.parametrize("uri", ["http://b/k", "s3://", "runs/x"])
def test_a_uri_that_is_not_s3_is_refused_by_the_s3_naming(uri):
    with pytest.raises(ValueError, match="not an S3 URI"):
        lineage.s3_bucket_and_key(uri)


def test_a_python_task_reports_to_the_hook_lineage_collector(monkeypatch):
    from airflow.providers.common.compat.lineage import hook as compat_hook

    reported = []

    class Collector:
        def add_input_asset(self, context, uri):
            reported.append(("in", context, uri))

        def add_output_asset(self, context, uri):
            reported.append(("out", context, uri))

    monkeypatch.setattr(compat_hook, "get_hook_lineage_collector", lambda: Collector())
    lineage.report_task_lineage("hook", ["s3a://b/runs/d/k/predictions/"], ["s3://b/forecast/latest.json"])
    assert reported == [("in", "hook", "s3://b/runs/d/k/predictions"), ("out", "hook", "s3://b/forecast/latest.json")]
