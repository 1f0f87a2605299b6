"""The Airflow side as a user installs it: both wheels built from the checkout, installed into a new venv without the
checkout, the bootstrap run twice, the DAGs parsed from a LocalDagBundle on the installed DAG files, and the whole DAG
run by that venv's `airflow dags test` for a landed drop, its Spark jobs from the installed package.

The new venv gets its third-party packages (Airflow and the providers) by a path line in a .pth file naming the
Airflow env's site-packages: a path line adds only that folder to sys.path and runs none of the .pth files in it,
so the checkout's editable install (its import hook) and plugins/ stay out, and pip installs the wheels into the
new venv alone (--ignore-installed: nothing in the shared env is uninstalled). A fresh install of Airflow would
cost minutes of the suite; the install and CLI checks cost ~27 s of CPU (building, `airflow db migrate`, 7 CLI
calls), the DAG run ~2.5 min (10 stores, 2 epochs: it shows that the installed code runs, not the model's quality).
"""
from __future__ import annotations

import json
import secrets
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from stack_helpers import (
    DAG_ID,
    JOB_CODE_SOURCE,
    JOBS_PYTHON,
    REPO_ROOT,
    SCORING_TASKS,
    SMALL_RUN_CONF,
    TASKS,
    embedded,
    start_stack,
    task_tries,
)

DEADLINE_DAG_ID = "rossmann_forecast_deadline"
SECRET = secrets.token_hex(8)   # made up at run time: no credential-looking literal in the repository


def run(command: list, env: dict[str, str], cwd: Path) -> str:
    result = subprocess.run([str(part) for part in command], env=env, cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def last_json(output: str):
    """The CLI's JSON output (its last line; warnings come before it)."""
    return json.loads(output.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def installed(tmp_path_factory, built_wheels):
    """(venv, environment, work dir): the wheels installed into a venv whose sys.path holds no checkout folder."""
    root = tmp_path_factory.mktemp("wheel-install")
    wheels, venv, work = built_wheels, root / "venv", root / "work"
    work.mkdir()
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site_probe = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(subprocess.run([venv / "bin" / "python", "-c", site_probe], check=True, capture_output=True,
                               text=True).stdout.strip())
    (site / "airflow_base.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--ignore-installed", *sorted(wheels.glob("*.whl"))], check=True)
    # A user's environment, not this test process's (which points Airflow at the checkout's dags/ and plugins/).
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(root), "LANG": "C.UTF-8",
           "AIRFLOW_HOME": str(root / "airflow-home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "no-plugins")}
    run([venv / "bin" / "python", "-m", "airflow", "db", "migrate"], env, work)   # as a deployment does first
    return venv, env, work, wheels


def test_installed_packages_come_from_the_wheels(installed):
    venv, env, work, _ = installed
    probe = ("import json, sys, importlib.metadata as md, rossmann, rossmann_jobs\n"
             "from packaging.requirements import Requirement\n"
             "reqs = [Requirement(r) for r in md.requires('rossmann-forecast')]\n"
             "print(json.dumps({'files': [rossmann.__file__, rossmann_jobs.__file__], 'path': sys.path,\n"
             "  'versions': [md.version('rossmann-forecast'), md.version('rossmann-jobs')],\n"
             "  'unmet': [str(r) for r in reqs if not r.specifier.contains(md.version(r.name))]}))")
    report = last_json(run([venv / "bin" / "python", "-c", probe], env, work))
    site = str(venv / "lib")
    assert all(path.startswith(site) for path in report["files"]), report["files"]
    venvs = str(REPO_ROOT / ".venvs")
    checkout = [path for path in report["path"] if path.startswith(str(REPO_ROOT)) and not path.startswith(venvs)]
    assert checkout == [], f"checkout folders on the installed venv's sys.path: {checkout}"
    assert report["versions"][0] == report["versions"][1], "the two wheels share one version"
    assert report["unmet"] == [], "rossmann-forecast's requirements are not met by the Airflow env"
    # The jobs wheel's command (`python -m rossmann_jobs.synth`: land drops, score forecasts) is installed too.
    assert "{generate,land,score}" in run([venv / "bin" / "rossmann-synth", "--help"], env, work)


def test_bootstrap_is_idempotent_and_says_what_it_did(installed):
    venv, env, work, _ = installed
    env = {**env, "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "spark://master:7077"}),
           "AIRFLOW_CONN_AWS_DEFAULT": json.dumps({"conn_type": "aws", "login": "key", "password": SECRET}),
           "ROSSMANN_SPARK_POOL_SLOTS": "2", "ROSSMANN_JOBS_ROOT": "/opt/rossmann-jobs"}
    first = run([venv / "bin" / "rossmann-forecast", "bootstrap"], env, work)
    second = run([venv / "bin" / "rossmann-forecast", "bootstrap"], env, work)
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
    changed = run([venv / "bin" / "rossmann-forecast", "bootstrap"], {**without_aws, **moved}, work)
    assert "pool rossmann_spark: 3 slot(s), updated" in changed
    assert "connection spark_default (spark): updated from AIRFLOW_CONN_SPARK_DEFAULT (stored unencrypted: [core] " \
        "fernet_key is not set)" in changed
    assert "connection aws_default: AIRFLOW_CONN_AWS_DEFAULT is not set, left as it is" in changed
    # What it stored is what the components read, without the environment variables.
    stored = run([venv / "bin" / "python", "-m", "airflow", "connections", "get", "spark_default", "-o", "json"],
                 {key: value for key, value in env.items() if not key.startswith("AIRFLOW_CONN_")}, work)
    assert last_json(stored)[0]["host"] == "spark://other:7077"
    # The Variables the bootstrap sets are the ones the DAG's templates read.
    dag_source = (REPO_ROOT / "dags" / "rossmann_forecast.py").read_text()
    assert "var.value.get('rossmann_jobs_root'" in dag_source and "var.value.get('rossmann_py_files'" in dag_source


def test_installed_wheel_parses_the_dags_from_a_bundle(installed):
    venv, env, work, _ = installed
    bundle = last_json(run([venv / "bin" / "rossmann-forecast", "bundle-config"], env, work))
    dags_folder = Path(bundle[0]["kwargs"]["path"])
    assert dags_folder.is_relative_to(venv) and sorted(path.name for path in dags_folder.glob("*.py")) == [
        f"{DAG_ID}.py", f"{DEADLINE_DAG_ID}.py"]
    env = {**env, "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundle)}
    airflow = [venv / "bin" / "python", "-m", "airflow"]
    errors = last_json(run([*airflow, "dags", "list-import-errors", "--local", "-B", "rossmann", "-o", "json"],
                           env, work))
    assert errors == []
    dags = last_json(run([*airflow, "dags", "list", "--local", "-B", "rossmann", "-o", "json",
                          "--columns", "dag_id,fileloc"], env, work))
    assert sorted(dag["dag_id"] for dag in dags) == [DAG_ID, DEADLINE_DAG_ID]
    assert all(Path(dag["fileloc"]).parent == dags_folder for dag in dags)
    tasks = run([*airflow, "tasks", "list", DAG_ID, "-B", "rossmann"], env, work).split()
    assert sorted(task for task in tasks if task in TASKS) == sorted(TASKS)
    # The job scripts spark-submit runs are those of the installed rossmann_jobs, not a path beside the DAG file.
    code = "from rossmann.spark_submit import default_jobs_root; print(default_jobs_root())"
    root = Path(run([venv / "bin" / "python", "-c", code], env, work).strip().splitlines()[-1])
    assert root.is_relative_to(venv) and (root / "rossmann_jobs" / "prepare.py").is_file()


@pytest.fixture(scope="module")
def wheel_stack(tmp_path_factory):
    """The embedded stack's S3 server and an Airflow home for the installed venv's DAG run."""
    handle = start_stack(tmp_path_factory.mktemp("wheel-stack"))
    yield handle
    embedded.stop_process(handle.state, "moto")


def test_installed_wheel_runs_the_dag_for_a_landed_drop(installed, wheel_stack):
    """`airflow dags test` of the installed venv, from the bundle, runs every task; spark-submit runs the installed
    rossmann_jobs' entry scripts and ships the jobs wheel (Variable rossmann_py_files), so no checkout code runs on
    either side. Before that, the same venv on a worker without SPARK_HOME fails the first Spark task once, naming
    the fix."""
    venv, user_env, work, wheels = installed
    logical_date, without_spark_date = "2015-07-31", "2015-07-30"
    wheel_stack.land(without_spark_date, logical_date)
    bundle = last_json(run([venv / "bin" / "rossmann-forecast", "bundle-config"], user_env, work))
    jobs_wheel = wheels / "rossmann_jobs.zip"   # the jobs wheel, named so that executors import it too
    # The Spark that spark-submit runs, as an Airflow worker names its Spark install (the jobs env's pyspark).
    spark_home = subprocess.run([JOBS_PYTHON, "-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))"],
                                check=True, capture_output=True, text=True).stdout.strip()
    # The stack's connections, pool, S3 and Airflow home; the venv's Airflow, DAG files and no plugins folder.
    env = {**wheel_stack.env, "PATH": f"{venv / 'bin'}:{wheel_stack.env['PATH']}", "HOME": user_env["HOME"],
           "AIRFLOW__CORE__PLUGINS_FOLDER": user_env["AIRFLOW__CORE__PLUGINS_FOLDER"],
           "AIRFLOW__CORE__DAGS_FOLDER": bundle[0]["kwargs"]["path"],
           "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundle),
           "AIRFLOW_VAR_ROSSMANN_PY_FILES": str(jobs_wheel), "SPARK_HOME": spark_home}
    conf = {**SMALL_RUN_CONF, "epochs": 2}

    def dags_test(day: str, run_env: dict[str, str]) -> str:
        result = subprocess.run([venv / "bin" / "python", "-m", "airflow", "dags", "test", DAG_ID, day, "-B",
                                 "rossmann", "-c", json.dumps(conf)], env=run_env, cwd=work, capture_output=True,
                                text=True, timeout=1200)
        return result.stdout + result.stderr

    # First as a worker without SPARK_HOME: spark-submit cannot find its Spark, and the task fails once, saying so
    # (a set-up problem: retries would meet the same worker).
    failed = dags_test(without_spark_date, {key: value for key, value in env.items() if key != "SPARK_HOME"})
    tries = task_tries(failed, "prepare_features")
    assert len(tries) == 1 and "Could not find valid SPARK_HOME" in tries[0] and "Set SPARK_HOME" in tries[0] and \
        "(not retried)" in tries[0], failed[-4000:]
    assert wheel_stack.run_summary(without_spark_date)["tasks"]["prepare_features"]["state"] == "failed"

    output = dags_test(logical_date, env)
    summary = wheel_stack.run_summary(logical_date)
    states = {task: info["state"] for task, info in summary["tasks"].items()}
    assert sorted(states) == sorted(TASKS), f"{states}\n{output[-6000:]}"
    assert all("success" in state for task, state in states.items() if task not in SCORING_TASKS), (
        f"{states}\n{output[-6000:]}")
    # Every Spark job ran the installed entry script with the jobs wheel on its path, never a checkout file.
    site = venv / "lib"
    for job in ("prepare", "train", "predict"):
        submits = [line for line in output.splitlines() if "spark-submit" in line and f"/{job}.py" in line]
        assert submits, f"no spark-submit of {job}.py in the run's output"
        assert all(f"{site}" in line and f"rossmann_jobs/{job}.py" in line and str(jobs_wheel) in line
                   for line in submits), submits
    # ... and each job's driver imported rossmann_jobs from the shipped wheel (spark_session logs where from).
    sources = JOB_CODE_SOURCE.findall(output)
    assert len(sources) >= 3 and set(sources) == {f"{jobs_wheel}/rossmann_jobs"}, sources
    assert f"{REPO_ROOT}/rossmann_jobs" not in output and f"{REPO_ROOT}/dags" not in output
    forecast = summary["xcom"]["publish_forecast"]
    assert wheel_stack.read_json(summary["xcom"]["plan_run"]["forecast_pointer"]) == forecast
    assert wheel_stack.read_bytes(forecast["submission_uri"]).startswith(b"Id,Sales")
