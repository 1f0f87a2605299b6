"""The docker-compose stack built and run for real: scripts/compose_e2e.sh builds the images (local Debian bases where
no registry answers), starts PostgreSQL, Airflow, a Spark master with two workers and the S3 server, lands a drop,
triggers the DAG through the REST API, kills a Spark worker container once training has a checkpoint, and tears the
stack down with its volumes. One run of the script feeds every assertion below, from the evidence it writes."""
from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from images import IMAGE_VENVS, TEST_TOOLING_MODULES  # scripts/compose/images.py: what the run probed
from stack_helpers import REPO_ROOT, SCORING_TASKS, TASKS

pytestmark = pytest.mark.slow

SCRIPT_TIMEOUT_S = 75 * 60
# Set by scripts/test.sh for the whole suite: the folder of the run it started beside the job side (evidence.json,
# output.log, exit_code), which this module checks instead of running the script again.
RUN_BESIDE_ENV = "ROSSMANN_COMPOSE_E2E_DIR"
PLACEMENT = re.compile(r"rank (\d)/2 runs in Spark executor dir \S+ \(host ([\w.-]+),")
KEPT_CHECKPOINT = re.compile(r"Horovod training failed: the checkpoint after epoch (\d+) under")
WORKERS = {"spark-worker-1", "spark-worker-2"}
KILL_TO_FAILURE_S = 120   # as for a killed rank on the embedded cluster (test_cluster_e2e.py)


def run_beside(folder: Path) -> tuple[Path, int | None, str]:
    """The evidence, exit code and output of the run scripts/test.sh started beside the job side (it has ended:
    the Airflow side starts after it)."""
    code = folder / "exit_code"
    return (folder / "evidence.json", int(code.read_text()) if code.exists() else None,
            (folder / "output.log").read_text() if (folder / "output.log").exists() else "")


@pytest.fixture(scope="module")
def evidence(tmp_path_factory):
    if os.environ.get(RUN_BESIDE_ENV):
        path, exit_code, output = run_beside(Path(os.environ[RUN_BESIDE_ENV]))
    else:
        path = tmp_path_factory.mktemp("compose-e2e") / "evidence.json"
        done = subprocess.run(["bash", "scripts/compose_e2e.sh", "--evidence", str(path),
                               "--kill-worker-during-train"],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S)
        exit_code, output = done.returncode, done.stdout + done.stderr
    print(output[-9000:])
    assert path.exists(), f"the script wrote no evidence (exit {exit_code}):\n{output[-7000:]}"
    found = json.loads(path.read_text())
    found["exit_code"], found["output"] = exit_code, output
    return found


def placements(log: str) -> dict[str, str]:
    """Horovod rank -> the host (container) it ran on, from the train job's log."""
    return dict(PLACEMENT.findall(log))


def test_the_script_passed_its_own_checks(evidence):
    failed = {name: problem for name, problem in evidence["checks"].items() if problem is not None}
    assert not failed and "error" not in evidence, (failed, evidence.get("error"), evidence["output"][-3000:])
    assert evidence["exit_code"] == 0


def test_images_were_built_from_official_or_local_bases_and_recorded(evidence):
    bases = {base["variable"]: base for base in evidence["base_images"]}
    assert set(bases) == {"ROSSMANN_PYTHON_IMAGE", "ROSSMANN_POSTGRES_IMAGE"}
    for base in bases.values():
        # A local stand-in only where the official image could be neither found nor pulled.
        local = base["image"].startswith("rossmann-local/")
        assert local == (base["source"] in ("built locally", "local, cached")), base
    built = {image["image"].split(":")[0]: image for image in evidence["images"]}
    assert {"rossmann-airflow", "rossmann-spark"} <= set(built)
    assert all(image["size_bytes"] > 100 * 2**20 and image["seconds"] >= 0 for image in built.values())
    assert all(image["image"].endswith(":e2e") for image in built.values())


def test_every_long_running_container_was_healthy(evidence):
    health = evidence["health"]
    expected = {"postgres", "minio", "spark-master", *WORKERS, "airflow-api-server", "airflow-scheduler",
                "airflow-dag-processor", "airflow-triggerer"}
    assert set(health) >= expected, health
    assert {service: health[service] for service in expected if health[service] != "healthy"} == {}


def test_the_rest_triggered_run_succeeded_and_only_train_needed_a_retry(evidence):
    tasks = evidence["tasks"]
    assert evidence["run"]["state"] == "success" and evidence["run"]["logical_date"].startswith(evidence["as_of"])
    assert set(tasks) == set(TASKS)
    assert {task: ti["state"] for task, ti in tasks.items() if task in SCORING_TASKS} == {
        task: "skipped" for task in SCORING_TASKS}   # the stack's first run: nothing earlier to score
    assert all(ti["state"] == "success" for task, ti in tasks.items() if task not in SCORING_TASKS), tasks
    assert tasks["train_model"]["try_number"] == 2
    assert {ti["try_number"] for task, ti in tasks.items() if task not in ("train_model", *SCORING_TASKS)} == {1}


def test_every_spark_job_ran_on_the_compose_spark_master(evidence):
    logs = evidence["logs"]
    for task in ("prepare_features", "train_model", "predict"):
        assert "master=spark://spark-master:7077 app=rossmann-" in logs[task][-1], logs[task][-1][-3000:]
    assert not any("master=local" in log for task_logs in logs.values() for log in task_logs)


def test_the_two_ranks_ran_on_the_two_worker_containers_in_both_tries(evidence):
    first, retry = evidence["logs"]["train_model"]
    for log in (first, retry):
        assert set(placements(log).values()) == WORKERS, log[-3000:]
    assert evidence["xcom"]["read_train_metrics"]["horovod_size"] == 2


def test_killing_a_worker_container_failed_the_try_and_the_retry_resumed_from_its_checkpoint(evidence):
    kill, (first, retry) = evidence["kill"], evidence["logs"]["train_model"]
    assert kill["killed"] and kill["service"] in WORKERS and kill["pointer_epoch"] >= 1
    assert kill["service"] in placements(first).values()   # it was running a rank when it died
    kept = int(KEPT_CHECKPOINT.search(first).group(1))
    epochs = evidence["conf"]["epochs"]
    assert kill["pointer_epoch"] <= kept <= kill["pointer_epoch"] + 1 < epochs
    # Failed fast: Gloo's next collective errors out on the surviving rank (container clocks are UTC, like the host's).
    failed_at = re.search(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ ERROR .*" + KEPT_CHECKPOINT.pattern, first).group(1)
    seconds = (datetime.fromisoformat(failed_at + "+00:00") - datetime.fromisoformat(kill["killed_at"])).total_seconds()
    print(f"try 1 failed {seconds:.0f} s after {kill['service']} was killed (checkpoint of epoch {kept} kept)")
    assert -1 < seconds < KILL_TO_FAILURE_S
    assert f"resuming from epoch {kept + 1} (checkpoint after epoch {kept}" in retry
    assert f"epoch 1/{epochs}:" not in retry and f"epoch {epochs}/{epochs}:" in retry
    # The killed container came back by its restart policy, and the master saw both workers again.
    assert evidence["worker_restarts"] >= 1
    assert evidence["spark_master"]["aliveworkers"] == 2
    tries = evidence["tasks"]["train_model"]
    killed_at = datetime.fromisoformat(kill["killed_at"])
    assert datetime.fromisoformat(tries["start_date"].replace("Z", "+00:00")) > killed_at   # the retry's start


def test_the_forecast_is_committed_for_every_test_row_of_the_drop(evidence):
    found, published = evidence["outputs"], evidence["xcom"]["publish_forecast"]
    sales = {int(row_id): value for row_id, value in found["submission"]["sales"].items()}
    assert found["submission"]["columns"] == ["Id", "Sales"]
    assert len(sales) == found["test_rows"] > 0
    closed = set(found["closed_ids"])
    assert closed and all(sales[row_id] == 0 for row_id in closed)
    assert all(value > 0 for row_id, value in sales.items() if row_id not in closed)
    assert found["forecast_pointer"] == published and published["as_of"] == evidence["as_of"]
    plan = evidence["xcom"]["plan_run"]
    assert published["submission_uri"].startswith(plan["forecast_published"] + "/")   # the published copy


def test_the_promoted_model_is_the_pinned_champion(evidence):
    gate, champion = evidence["xcom"]["quality_gate"], evidence["outputs"]["champion"]
    metrics = evidence["xcom"]["read_train_metrics"]
    assert gate["promoted"] is True and gate["candidate_model_uri"] == metrics["model_attempt_uri"]
    assert champion["model_uri"] == gate["champion_model_uri"] and champion["source_model_uri"] == metrics[
        "model_attempt_uri"]
    assert f"{champion['model_uri']}/model/weights.npz" in evidence["outputs"]["champion_files"]
    assert metrics["best_val_exp_rmspe"] < 0.5   # a model that learned


def test_no_secret_reached_a_task_log_or_a_container_log(evidence):
    assert set(evidence["secrets_found"]) >= {"ROSSMANN_S3_SECRET_KEY", "AIRFLOW_ADMIN_PASSWORD", "POSTGRES_PASSWORD"}
    assert {name: where for name, where in evidence["secrets_found"].items() if where} == {}
    # The scan saw real logs: every task's tries, and the services' own output.
    assert all(log.strip() and not log.startswith("<HTTP") for logs in evidence["logs"].values() for log in logs)


def test_teardown_removed_every_container_volume_and_network(evidence):
    assert evidence["teardown"]["left"] == {"containers": [], "volumes": [], "networks": []}


def test_each_s3_identity_reaches_only_its_prefixes(evidence):
    """The lander writes raw/ and nothing else, and reads nothing outside raw/; the jobs cannot write models/ (only
    the gate pins champions); Airflow cannot write raw/ (docker/minio/minio-init.sh, docs/deploy.md). Only with
    MinIO: the local stand-in (moto) enforces no policy; tests/jobs/test_s3_policies.py checks the policies' text."""
    if "local" in evidence.get("s3_server", ""):
        pytest.skip("the stack ran the local S3 server (moto), which enforces no policy")
    probe = evidence["identities"]
    assert probe["lander put raw/"] == "allowed", probe   # the probe reaches MinIO: a refusal below is a policy's
    assert {name: code for name, code in probe.items() if name != "lander put raw/"} == {
        name: "AccessDenied" for name in probe if name != "lander put raw/"}, probe


def test_the_images_hold_no_test_tooling(evidence):
    tooling = evidence["image_tooling"]
    assert {key.split()[0].split(":")[0] for key in tooling} == set(IMAGE_VENVS) == {"rossmann-airflow",
                                                                                   "rossmann-spark"}
    for venv, found in tooling.items():
        assert {module: found[module] for module in TEST_TOOLING_MODULES} == dict.fromkeys(
            ("moto", "pytest", "ruff", "selenium"), False), venv
        assert any(found[module] for module in ("airflow", "pyspark") if module in found), venv


def test_the_cli_container_reaches_the_bucket_and_nothing_else(evidence):
    """The data supplier's tool is on the storage network only: MinIO answers (the positive control), while the
    Spark master, Airflow's components and the database have no name there (docker-compose.yaml's networks)."""
    reach = evidence["cli_reach"]
    assert reach["minio:9000"] == "reachable", reach
    assert {target: outcome for target, outcome in reach.items() if target != "minio:9000"} == {
        "spark-master:7077": "no such host", "airflow-scheduler:8793": "no such host",
        "airflow-api-server:8080": "no such host", "postgres:5432": "no such host"}


def test_the_spark_master_refuses_a_driver_without_the_secret(evidence):
    """A driver on the Spark network without SPARK_AUTH_SECRET gets no executor and counts nothing, and the
    master's log says why; the DAG run's drivers, which read the secret from their spark-defaults.conf, ran."""
    refused = evidence["unauthenticated_submit"]
    assert not refused["counted"] and refused["returncode"] != 0, refused
    assert re.search(r"(?i)sasl|authenticat", refused["master_log_tail"]), refused["master_log_tail"]
    assert evidence["tasks"]["train_model"]["state"] == "success"


def test_the_spark_drivers_run_as_their_own_user_without_airflows_secrets(evidence):
    """Each driver process seen during the run (the SparkSubmit JVM, the job's Python) belongs to sparkjob, and its
    /proc/<pid>/environ holds the jobs' own S3 key (the control: a real environment was read) and none of Airflow's
    secrets: the Fernet key, JWT and API secrets, the database password, aws_default's key, the Spark secret."""
    seen, uid = evidence["drivers"], evidence["scheduler_environ"]["driver_uid"]
    drivers = [driver for driver in seen if not driver["launcher"]]
    launchers = [driver for driver in seen if driver["launcher"]]   # the sudo each task starts, as airflow
    assert len(drivers) >= 3 and uid is not None, seen
    assert {driver["uid"] for driver in drivers} == {uid} and uid not in {launcher["uid"] for launcher in launchers}
    assert all(set(driver["secrets"]) <= {"ROSSMANN_S3_JOBS_SECRET_KEY"} for driver in seen), seen
    assert any(driver["secrets"] == ["ROSSMANN_S3_JOBS_SECRET_KEY"] for driver in drivers), drivers
    assert any(driver["args"].split()[0].endswith("/java") for driver in drivers), drivers   # the SparkSubmit JVM
    assert {job for driver in drivers for job in ("prepare", "train", "predict")
            if f"rossmann_jobs/{job}.py" in driver["args"]} == {"prepare", "train", "predict"}, drivers


def test_the_drivers_user_cannot_read_the_schedulers_environment(evidence):
    """The scheduler container's first process holds every Airflow secret in its environment: airflow (the old
    operator's driver user) reads the Fernet key there, the drivers' user is refused."""
    environ = evidence["scheduler_environ"]
    assert environ["airflow"] == {"returncode": 0, "holds_fernet_key": True}, environ
    assert environ["sparkjob"]["returncode"] != 0 and environ["sparkjob"]["holds_fernet_key"] is False, environ
