"""The Airflow side as a user installs it (installed_venv.py): both wheels built from the checkout, installed into a
new venv without the checkout, the bootstrap run twice, and the DAGs parsed from a LocalDagBundle on the installed
DAG files. A worker without SPARK_HOME fails the first Spark task once, naming the fix.

The installed venv's whole DAG run is the cluster end to end's (tests/dag/test_cluster_e2e.py): its Airflow runs the
installed DAG from the bundle there, spark-submit runs the installed entry scripts and ships the jobs wheel, so one
run shows that the installed code runs and that it runs on a cluster. The install and CLI checks here cost ~27 s of
CPU (building, `airflow db migrate`, 7 CLI calls).
"""
from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from installed_venv import last_json
from stack_helpers import DAG_ID, REPO_ROOT, SMALL_RUN_CONF, TASKS, embedded, start_stack, task_tries

DEADLINE_DAG_ID = "rossmann_forecast_deadline"
SECRET = secrets.token_hex(8)   # made up at run time: no credential-looking literal in the repository


def test_installed_packages_come_from_the_wheels(installed):
    venv, env, run = installed.venv, installed.env, installed.run
    probe = ("import json, sys, importlib.metadata as md, rossmann, rossmann_jobs\n"
             "from packaging.requirements import Requirement\n"
             "reqs = [Requirement(r) for r in md.requires('rossmann-forecast')]\n"
             "print(json.dumps({'files': [rossmann.__file__, rossmann_jobs.__file__], 'path': sys.path,\n"
             "  'versions': [md.version('rossmann-forecast'), md.version('rossmann-jobs')],\n"
             "  'unmet': [str(r) for r in reqs if not r.specifier.contains(md.version(r.name))]}))")
    report = last_json(run([venv / "bin" / "python", "-c", probe], env))
    site = str(venv / "lib")
    assert all(path.startswith(site) for path in report["files"]), report["files"]
    venvs = str(REPO_ROOT / ".venvs")
    checkout = [path for path in report["path"] if path.startswith(str(REPO_ROOT)) and not path.startswith(venvs)]
    assert checkout == [], f"checkout folders on the installed venv's sys.path: {checkout}"
    assert report["versions"][0] == report["versions"][1], "the two wheels share one version"
    assert report["unmet"] == [], "rossmann-forecast's requirements are not met by the Airflow env"
    # The jobs wheel's command (`python -m rossmann_jobs.synth`: land drops, score forecasts) is installed too.
    assert "{generate,land,score}" in run([venv / "bin" / "rossmann-synth", "--help"], env)


def test_bootstrap_is_idempotent_and_says_what_it_did(installed):
    venv, env, run = installed.venv, installed.env, installed.run
    env = {**env, "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "spark://master:7077"}),
           "AIRFLOW_CONN_AWS_DEFAULT": json.dumps({"conn_type": "aws", "login": "key", "password": SECRET}),
           "ROSSMANN_SPARK_POOL_SLOTS": "2", "ROSSMANN_JOBS_ROOT": "/opt/rossmann-jobs"}
    first = run([venv / "bin" / "rossmann-forecast", "bootstrap"], env)
    second = run([venv / "bin" / "rossmann-forecast", "bootstrap"], env)
    assert "pool rossmann_spark: 2 slot(s), created" in first
    assert "connection spark_default (spark): created from AIRFLOW_CONN_SPARK_DEFAULT" in first
    assert "connection aws_default (aws): created from AIRFLOW_CONN_AWS_DEFAULT\n" in first   # encrypted
    assert "connection rossmann_alerts: AIRFLOW_CONN_ROSSMANN_ALERTS is not set" in first
    assert "variable rossmann_jobs_root = '/opt/rossmann-jobs': created" in first
    assert "variable rossmann_py_files: ROSSMANN_PY_FILES is not set" in first
    for line in ("pool rossmann_spark: 2 slot(s), unchanged", "connection spark_default (spark): unchanged",
                 "connection aws_default (aws): unchanged", "variable rossmann_jobs_root = '/opt/rossmann-jobs': "
                 "unchanged"):
        assert line in second
    assert "created" not in second and "updated" not in second
    assert SECRET not in first + second
    moved = {"AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "spark://other:7077",
                                                       "extra": {"deploy-mode": "client"}}),
             "ROSSMANN_SPARK_POOL_SLOTS": "3", "AIRFLOW__CORE__FERNET_KEY": ""}   # no key: Airflow stores clear text
    without_aws = {key: value for key, value in env.items() if key != "AIRFLOW_CONN_AWS_DEFAULT"}
    changed = run([venv / "bin" / "rossmann-forecast", "bootstrap"], {**without_aws, **moved})
    assert "pool rossmann_spark: 3 slot(s), updated" in changed
    assert "connection spark_default (spark): updated from AIRFLOW_CONN_SPARK_DEFAULT (stored unencrypted: [core] " \
        "fernet_key is not set)" in changed
    assert "connection aws_default: AIRFLOW_CONN_AWS_DEFAULT is not set, left as it is" in changed
    # What it stored is what the components read, without the environment variables.
    stored = run([venv / "bin" / "python", "-m", "airflow", "connections", "get", "spark_default", "-o", "json"],
                 {key: value for key, value in env.items() if not key.startswith("AIRFLOW_CONN_")})
    assert last_json(stored)[0]["host"] == "spark://other:7077"
    # The Variables the bootstrap sets are the ones the DAG's templates read.
    dag_source = (REPO_ROOT / "dags" / "rossmann_forecast.py").read_text()
    assert "var.value.get('rossmann_jobs_root'" in dag_source and "var.value.get('rossmann_py_files'" in dag_source


def test_installed_wheel_parses_the_dags_from_a_bundle(installed):
    venv, env, run = installed.venv, installed.env, installed.run
    bundle = last_json(run([venv / "bin" / "rossmann-forecast", "bundle-config"], env))
    dags_folder = Path(bundle[0]["kwargs"]["path"])
    assert dags_folder.is_relative_to(venv) and sorted(path.name for path in dags_folder.glob("*.py")) == [
        f"{DAG_ID}.py", f"{DEADLINE_DAG_ID}.py"]
    env = {**env, "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundle)}
    airflow = [venv / "bin" / "python", "-m", "airflow"]
    errors = last_json(run([*airflow, "dags", "list-import-errors", "--local", "-B", "rossmann", "-o", "json"],
                           env))
    assert errors == []
    dags = last_json(run([*airflow, "dags", "list", "--local", "-B", "rossmann", "-o", "json",
                          "--columns", "dag_id,fileloc"], env))
    assert sorted(dag["dag_id"] for dag in dags) == [DAG_ID, DEADLINE_DAG_ID]
    assert all(Path(dag["fileloc"]).parent == dags_folder for dag in dags)
    tasks = run([*airflow, "tasks", "list", DAG_ID, "-B", "rossmann"], env).split()
    assert sorted(task for task in tasks if task in TASKS) == sorted(TASKS)
    # The job scripts spark-submit runs are those of the installed rossmann_jobs, not a path beside the DAG file.
    code = "from rossmann.spark_submit import default_jobs_root; print(default_jobs_root())"
    root = Path(run([venv / "bin" / "python", "-c", code], env).strip().splitlines()[-1])
    assert root.is_relative_to(venv) and (root / "rossmann_jobs" / "prepare.py").is_file()


@pytest.fixture(scope="module")
def wheel_stack(tmp_path_factory):
    """The embedded stack's S3 server and an Airflow home for the installed venv's DAG run."""
    handle = start_stack(tmp_path_factory.mktemp("wheel-stack"))
    yield handle
    embedded.stop_process(handle.state, "moto")


def test_installed_wheel_on_a_worker_without_spark_home_fails_the_first_spark_task_once_naming_the_fix(
        installed, wheel_stack):
    """`airflow dags test` of the installed venv, from the bundle, on a worker without SPARK_HOME: spark-submit
    cannot find its Spark, and the task fails once, saying so (a set-up problem: retries would meet the same
    worker). The same venv with SPARK_HOME runs the whole DAG in tests/dag/test_cluster_e2e.py."""
    logical_date = "2015-07-30"
    wheel_stack.land(logical_date, logical_date)
    env = installed.stack_env(wheel_stack.env)
    del env["SPARK_HOME"]
    failed = installed.dags_test(logical_date, {**SMALL_RUN_CONF, "epochs": 2}, env, timeout_s=1200)
    output = failed.stdout + failed.stderr
    tries = task_tries(output, "prepare_features")
    assert len(tries) == 1 and "Could not find valid SPARK_HOME" in tries[0] and "Set SPARK_HOME" in tries[0] and \
        "(not retried)" in tries[0], output[-4000:]
    summary = wheel_stack.run_summary(logical_date)
    assert sorted(summary["tasks"]) == sorted(TASKS)
    assert summary["tasks"]["prepare_features"]["state"] == "failed"
