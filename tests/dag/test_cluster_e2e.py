"""The DAG unchanged on a real Spark standalone cluster (a master and two 1-core workers on 127.0.0.1) with Airflow's
metadata on PostgreSQL, and a Horovod rank killed mid-training: one `airflow dags test` run feeds every assertion.
It is the installed wheels' run too (installed_venv.py, tests/dag/test_wheel_install.py): the Airflow of a venv
without the checkout runs the DAG from the installed bundle, and spark-submit the installed entry scripts.

The workers stand for nodes that have Java, a plain Python 3.11 and Spark, but no jobs environment (stack_spark's
node_env). Every job ships its executors' Python as the packed executor environment (spark.archives, built by
`scripts/setup_env.sh --executor-env-archive`) and the job package as the built jobs wheel (`make dist`'s
rossmann_jobs.zip, --py-files through the Variable rossmann_py_files): docs/deploy.md's option 3 as a deployment
would configure it.

The run lands the same generated drop as test_dag_e2e's local-mode run (`first_run`, Spark local[2]) and must give
the same results within the tolerances below. While it trains, the test itself SIGKILLs rank 1's process once the
run's checkpoint pointer names epoch 1 or later (rank_killer.py, as a lost node would; the job has no hook for it):
the first try of train_model must fail fast and Airflow's retry (retries=2; its delay shortened for the test) must
resume from the checkpoint the first try left.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from rank_killer import RankKiller
from stack_helpers import (
    FIRST_DATE,
    FIRST_RUN_CONF,
    JOB_CODE_SOURCE,
    JOBS_PYTHON,
    REPO_ROOT,
    SCORING_TASKS,
    embedded,
    retry_after,
    retry_gap,
    run_dag,
    start_stack,
    task_tries,
)

pytestmark = pytest.mark.slow

KILL_AFTER_EPOCH = 1   # the rank is killed once a checkpoint of this epoch or a later one exists
# Both runs see the same rows, shards (files[rank::2]), seeds and learning-rate schedule. They differ by
# floating-point reduction order (Gloo, TensorFlow threads) and by the resume: weights and Adam slots come back from
# the checkpoint, but dropout's random state does not, so epochs 2.. draw other dropout masks (dropout 0.5).
# Measured with learned models (2026-11-24): val exp_rmspe 0.12459 vs 0.12042 and forecasts 0.0378 apart (6 epochs
# of the reference MLP); 0.11345 vs 0.10899 (4.1 %) and 0.0329 (12 epochs of the 256-128 MLP). The negative
# control below (local mode's features with rank 1's labels shuffled, deterministic) measured a 41.6 % val gap and a
# 0.1056 forecast disagreement, which the old forecast bound of 0.12 let pass; the bound is now 0.07 (about twice the
# largest cluster disagreement seen, 1.5x below the broken run's). Both runs must also have learned (< 0.5).
VAL_EXP_RMSPE_REL_TOL = 0.20
FORECAST_AGREEMENT_RMSPE = 0.07
LEARNED_VAL_EXP_RMSPE = 0.5
# A dead rank must fail the try quickly: Gloo's next allreduce on the surviving rank errors out at once.
KILL_TO_FAILURE_S = 120
# The retry starts this soon after the failed try (a stack policy, stack_helpers.retry_after), not after the DAG's
# retry_delay of 1 min with its backoff (89 s idle for this task and date): the test is about the resume, not the wait.
RETRY_AFTER_S = 5


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    state = embedded.Stack(tmp_path_factory.mktemp("spark-cluster"))
    with embedded.running_spark_cluster(state, workers=2, cores=1, memory="2g") as master:
        yield state, master


@pytest.fixture(scope="module")
def executor_env_archive() -> Path:
    """The packed executor environment as the set-up builds it (cached by its pins: built once per machine)."""
    done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "setup_env.sh"), "--executor-env-archive"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    print(done.stdout)
    return Path(done.stdout.strip().splitlines()[-1])


class UnpackedEnvJanitor(threading.Thread):
    """Deletes the executor environments (1.4 GB each, one per executor and application) that finished
    applications unpacked, while the run goes on: what a node's spark.worker.cleanup does, but keeping the
    executors' logs and folders that the assertions read."""

    def __init__(self, cluster, poll_s: float = 5.0):
        super().__init__(daemon=True)
        self.cluster, self.poll_s, self.removed = cluster, poll_s, []
        self._stop_event = threading.Event()

    def sweep(self) -> None:
        finished = {app["id"] for app in embedded.spark_cluster_status(self.cluster)["completedapps"]}
        for index in (1, 2):
            for app in finished:
                for unpacked in (embedded.spark_worker_dir(self.cluster, index) / app).glob(
                        f"*/{embedded.EXECUTOR_ENV_ALIAS}"):
                    shutil.rmtree(unpacked)
                    self.removed.append(str(unpacked))

    def run(self) -> None:
        while not self._stop_event.wait(self.poll_s):
            self.sweep()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.sweep()


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory, spark_cluster, postgres_server, executor_env_archive, installed):
    cluster, master = spark_cluster
    stack = start_stack(tmp_path_factory.mktemp("cluster-stack"), spark_master=master,
                        spark_conf=embedded.spark_cluster_conf(cluster, executor_env_archive=executor_env_archive),
                        sql_alchemy_conn=embedded.postgres_database(postgres_server, "airflow_cluster"))
    retry_after(stack, RETRY_AFTER_S)
    janitor = UnpackedEnvJanitor(cluster)
    janitor.start()
    try:
        started = time.monotonic()
        killer = RankKiller(stack, f"s3://{stack.bucket}/runs/{FIRST_DATE}", rank=1, after_epoch=KILL_AFTER_EPOCH)
        try:
            run = run_dag(stack, FIRST_DATE, FIRST_RUN_CONF, installed=installed)
        finally:
            killer.stop()
            janitor.stop()
        print(f"cluster DAG run took {time.monotonic() - started:.0f} s; rank 1 (pids {killer.killed_pids}) killed "
              f"at {killer.killed_at} with the checkpoint of epoch {killer.pointer_epoch}; "
              f"{len(janitor.removed)} unpacked executor environments removed after their applications")
        yield {**run, "stack": stack, "master": master, "cluster": cluster, "killer": killer, "janitor": janitor,
               "installed": installed,
               "train_logs": task_tries(run["output"], "train_model")}
    finally:
        embedded.stop_process(stack.state, "moto")


def committed_attempt(stack, out_uri: str) -> str:
    return f"{out_uri}/{stack.read_json(f'{out_uri}/_SUCCESS')['attempt']}"


def logged_at(log: str, text: str) -> datetime:
    """Timestamp of the first line containing text, from the job's own logging prefix."""
    stamp = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
    line = next(line for line in log.splitlines() if text in line and stamp.search(line))
    return datetime.strptime(stamp.search(line).group(), "%Y-%m-%d %H:%M:%S")


def forecast(stack, run) -> dict[int, float]:
    # Through the committed manifest, not the run's XCom: test_dag_e2e's in-place re-run replaces the attempt.
    uri = f"{committed_attempt(stack, run['summary']['xcom']['plan_run']['predictions'])}/submission.csv"
    return {int(row["Id"]): float(row["Sales"]) for row in csv.DictReader(io.StringIO(stack.read_bytes(uri).decode()))}


def test_every_task_succeeded_and_only_train_needed_its_retry(cluster_run):
    tasks = {task: info for task, info in cluster_run["summary"]["tasks"].items() if task not in SCORING_TASKS}
    assert all("success" in info["state"] for info in tasks.values()), tasks
    assert tasks["train_model"]["try_number"] == 2 and len(cluster_run["train_logs"]) == 2
    assert {info["try_number"] for task, info in tasks.items() if task != "train_model"} == {1}
    # The stack's first run: nothing earlier to score.
    assert {cluster_run["summary"]["tasks"][task]["state"] for task in SCORING_TASKS} == {"skipped"}


def test_every_spark_job_ran_on_the_standalone_master(cluster_run):
    logs = cluster_run["output"]
    # build_spark_session logs the master the SparkContext really got, once per job.
    assert len(re.findall(rf"master={re.escape(cluster_run['master'])} app=rossmann-", logs)) >= 4
    assert "master=local" not in logs


def test_the_two_horovod_ranks_ran_in_two_different_executors_on_different_workers(cluster_run):
    cluster, log = cluster_run["cluster"], cluster_run["train_logs"][1]
    placed = dict(re.findall(r"rank (\d)/2 runs in Spark executor dir (\S+)", log))
    assert sorted(placed) == ["0", "1"], log[-3000:]
    # Spark's standalone worker runs each executor in <worker dir>/<application id>/<executor id>/.
    workers = {index: embedded.spark_worker_dir(cluster, index).resolve() for index in (1, 2)}
    owner = {}
    for rank, executor_dir in placed.items():
        path = Path(executor_dir).resolve()
        assert path.is_dir()
        owner[rank] = next(index for index, root in workers.items() if root in path.parents)
        assert path.parent.parent == workers[owner[rank]]
    assert owner["0"] != owner["1"]
    apps = {Path(executor_dir).parent.name for executor_dir in placed.values()}
    assert len(apps) == 1
    # The master's own record: this application ran there, with both workers.
    status = embedded.spark_cluster_status(cluster)
    assert apps <= {app["id"] for app in status["completedapps"]}
    assert status["aliveworkers"] == 2
    metrics = cluster_run["summary"]["xcom"]["read_train_metrics"]
    assert metrics["horovod_size"] == 2


def process_environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(entry.partition("=")[::2] for entry in entries if "=" in entry)


def test_the_workers_have_no_jobs_environment(cluster_run):
    """The workers' own environment: Spark's distribution as SPARK_HOME, and no Python of the jobs venv."""
    cluster, venvs = cluster_run["cluster"], str(REPO_ROOT / ".venvs")
    for index in (1, 2):
        environ = process_environ(embedded.running_pid(cluster, f"spark-worker-{index}"))
        assert not [entry for entry in environ["PATH"].split(os.pathsep) if entry.startswith(venvs)], environ["PATH"]
        assert not {"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH"} & set(environ)
        assert Path(environ["SPARK_HOME"], "bin", "spark-class").is_file()


RANK_PLACEMENT = re.compile(r"rank (\d)/2 runs in Spark executor dir (\S+) \(.*, python (\S+), rossmann_jobs from "
                            r"(\S+)\)")


def test_the_installed_wheels_ran_the_dag_and_every_spark_job(cluster_run):
    """The run is the installed venv's (installed_venv.py): its Airflow ran the DAG from the installed bundle, and
    spark-submit ran the installed rossmann_jobs' entry scripts with the jobs wheel on --py-files, never a checkout
    file."""
    output, installed = cluster_run["output"], cluster_run["installed"]
    site = installed.venv / "lib"
    for job in ("prepare", "train", "predict"):
        submits = [line for line in output.splitlines() if "spark-submit" in line and f"/{job}.py" in line]
        assert submits, f"no spark-submit of {job}.py in the run's output"
        assert all(f"{site}" in line and f"rossmann_jobs/{job}.py" in line and str(installed.jobs_wheel) in line
                   for line in submits), submits
    assert f"{REPO_ROOT}/rossmann_jobs" not in output and f"{REPO_ROOT}/dags" not in output


def test_every_rank_ran_the_shipped_environment_and_package(cluster_run):
    """Each rank's Python is the archive unpacked in its executor's folder, and its rossmann_jobs the shipped wheel;
    the drivers imported the wheel too. Only the finished applications' unpacked copies are gone (the janitor)."""
    wheel = cluster_run["installed"].jobs_wheel
    for log in cluster_run["train_logs"]:
        placed = RANK_PLACEMENT.findall(log)
        assert sorted(rank for rank, *_ in placed) == ["0", "1"], log[-3000:]
        for _, executor_dir, python, package_dir in placed:
            assert python == f"{executor_dir}/{embedded.EXECUTOR_ENV_ALIAS}/bin/python"
            assert package_dir == f"{executor_dir}/{wheel.name}/rossmann_jobs"
    drivers = JOB_CODE_SOURCE.findall(cluster_run["output"])
    assert len(drivers) >= 4 and set(drivers) == {f"{wheel}/rossmann_jobs"}, set(drivers)
    # Every Spark job's executors unpacked the archive: prepare, both tries of train and predict, 2 executors each.
    removed = cluster_run["janitor"].removed
    assert len(removed) >= 8 and len({Path(path).parent.parent.name for path in removed}) >= 4, removed
    assert not list((cluster_run["cluster"].state_dir / "spark").glob(f"worker-*/*/*/{embedded.EXECUTOR_ENV_ALIAS}"))


KEPT_CHECKPOINT = re.compile(r"Horovod training failed: the checkpoint after epoch (\d+) under")


def failed_at(first_try_log: str) -> datetime:
    """When the failed first try reported the checkpoint it kept."""
    return logged_at(first_try_log, KEPT_CHECKPOINT.search(first_try_log).group(0))


def kept_epoch(first_try_log: str) -> int:
    """The epoch whose checkpoint the failed first try reported it kept."""
    found = KEPT_CHECKPOINT.search(first_try_log)
    assert found, first_try_log[-4000:]
    return int(found.group(1))


def test_the_first_try_failed_fast_with_a_clear_error_after_the_killed_rank(cluster_run):
    killer, log = cluster_run["killer"], cluster_run["train_logs"][0]
    assert killer.killed_pids, "rank 1 was never found running after the first checkpoint"
    kept, epochs = kept_epoch(log), FIRST_RUN_CONF["epochs"]
    # The rank died after epoch `pointer_epoch` was checkpointed; rank 0 may have checkpointed one more before Gloo's
    # next collective failed, never more.
    assert KILL_AFTER_EPOCH <= killer.pointer_epoch <= kept <= killer.pointer_epoch + 1 < epochs
    seconds = (failed_at(log) - killer.killed_at).total_seconds()
    print(f"try 1 failed {seconds:.0f} s after the kill (checkpoint of epoch {kept} kept)")
    assert seconds < KILL_TO_FAILURE_S
    assert f"epoch {kept}/{epochs}:" in log and f"epoch {kept + 1}/{epochs}:" not in log


def test_the_retry_resumed_from_the_checkpoint_of_the_killed_try(cluster_run):
    kept, epochs = kept_epoch(cluster_run["train_logs"][0]), FIRST_RUN_CONF["epochs"]
    log = cluster_run["train_logs"][1]
    assert f"resuming from epoch {kept + 1} (checkpoint after epoch {kept}" in log
    assert f"epoch 1/{epochs}:" not in log
    stack, plan = cluster_run["stack"], cluster_run["summary"]["xcom"]["plan_run"]
    metrics = stack.read_json(f"{committed_attempt(stack, plan['model'])}/metrics.json")
    assert metrics["resumed_after_epoch"] == kept
    assert [entry["epoch"] for entry in metrics["epochs"]] == list(range(1, epochs + 1))
    before, after = metrics["epochs"][kept - 1], metrics["epochs"][kept]
    assert before["run_id"] != after["run_id"]   # the epochs after the kept checkpoint come from the retry
    waited = (logged_at(log, "") - failed_at(cluster_run["train_logs"][0])).total_seconds()
    ended, started = retry_gap(cluster_run["output"], "train_model")
    idle = (started - ended).total_seconds()
    print(f"the retry started {idle:.0f} s after the first try ended; its first log line came {waited:.0f} s after "
          "the first try failed")
    # The DAG's own delay for this try would be 89 s (Airflow's jitter is fixed per task and date; never under
    # 60 s); with the policy 5 s (9 s with the jitter). Measured between Airflow's own marks of the two tries, not
    # from the job's log lines, which add the task hand-over and the job's start-up (~35 s, more on a loaded
    # machine: 84 s there once, against 44 s on a quiet one).
    assert idle < 45, "the stack's retry policy (retry_after) did not apply: the retry waited the DAG's delay"


def test_prepare_outputs_are_identical_to_local_mode(cluster_run, first_run, dag_test_stack):
    documents = []
    for stack, run in ((cluster_run["stack"], cluster_run), (dag_test_stack, first_run)):
        features = run["summary"]["xcom"]["plan_run"]["features"]
        documents.append(stack.read_json(f"{committed_attempt(stack, features)}/metadata.json"))
    cluster_metadata, local_metadata = documents
    for key in ("row_counts", "feature_spec", "vocabularies", "max_sales", "input_checksums", "num_shards",
                "validation_window", "test_window", "as_of"):
        assert cluster_metadata[key] == local_metadata[key], key
    assert cluster_metadata["row_counts"]["train"] > 0


def val_exp_rmspe_gap(run: float, local: float) -> float:
    """Relative distance of a run's best val exp_rmspe from local mode's."""
    return abs(run / local - 1)


def forecast_disagreement(run: dict[int, float], local: dict[int, float], closed: set[int]) -> float:
    """exp-RMSPE of a run's forecast against local mode's, over the open rows both forecast."""
    open_ids = [i for i in local if i not in closed]
    return math.sqrt(sum((1 - run[i] / local[i]) ** 2 for i in open_ids) / len(open_ids))


def closed_ids(stack) -> set[int]:
    raw_test = csv.DictReader(io.StringIO(stack.read_bytes(f"s3://{stack.bucket}/raw/{FIRST_DATE}/test.csv").decode()))
    return {int(row["Id"]) for row in raw_test if row["Open"] == "0"}


def test_validation_score_matches_local_mode_despite_the_kill(cluster_run, first_run):
    cluster = cluster_run["summary"]["xcom"]["read_train_metrics"]
    local = first_run["summary"]["xcom"]["read_train_metrics"]
    assert cluster["epochs_run"] == local["epochs_run"] == FIRST_RUN_CONF["epochs"]
    assert math.isfinite(cluster["best_val_exp_rmspe"])
    assert cluster["best_val_exp_rmspe"] < LEARNED_VAL_EXP_RMSPE and local["best_val_exp_rmspe"] < LEARNED_VAL_EXP_RMSPE
    print(f"val exp_rmspe: cluster {cluster['best_val_exp_rmspe']:.5f}, local {local['best_val_exp_rmspe']:.5f}")
    assert val_exp_rmspe_gap(cluster["best_val_exp_rmspe"], local["best_val_exp_rmspe"]) < VAL_EXP_RMSPE_REL_TOL


def test_forecast_matches_local_mode(cluster_run, first_run, dag_test_stack):
    stack = cluster_run["stack"]
    cluster, local = forecast(stack, cluster_run), forecast(dag_test_stack, first_run)
    assert sorted(cluster) == sorted(local)
    closed = closed_ids(stack)
    assert closed and all(cluster[i] == local[i] == 0 for i in closed)
    assert all(cluster[i] > 0 and local[i] > 0 for i in cluster if i not in closed)
    agreement = forecast_disagreement(cluster, local, closed)
    print(f"forecast agreement (exp-RMSPE of cluster vs local): {agreement:.5f} over {len(local) - len(closed)} "
          "open rows")
    assert agreement < FORECAST_AGREEMENT_RMSPE


@pytest.fixture(scope="module")
def shuffled_rank_run(dag_test_stack, first_run):
    """Negative control: local mode's own features with rank 1's train labels shuffled, then train and predict with
    the exact arguments local mode's tasks rendered (spark-submit, local[2]), outside Airflow."""
    stack, plan = dag_test_stack, first_run["summary"]["xcom"]["plan_run"]
    # Under runs/: the jobs load models only from the storage root's models/ and runs/ (model/trust.py).
    base = f"s3://{stack.bucket}/runs/negative-control/{FIRST_DATE}"
    env = {**os.environ, **embedded.aws_env(stack.state, stack.endpoint), "PYTHONPATH": str(REPO_ROOT),
           "PATH": f"{JOBS_PYTHON.parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def job(command: list[str]) -> str:
        done = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        return done.stdout

    shuffled = json.loads(job([str(JOBS_PYTHON), "tests/dag/shuffle_rank_labels.py", "--features", plan["features"],
                               "--out", f"{base}/features"]).strip().splitlines()[-1])
    rendered = first_run["summary"]["rendered_fields"]
    replace = {"--features": f"{base}/features", "--out": f"{base}/model", "--champion-model": "",
               "--champion-model-sha256": "", "--warm-start-model": "", "--warm-start-model-sha256": ""}
    args = list(rendered["train_model"]["application_args"])
    for flag, value in replace.items():
        args[args.index(flag) + 1] = value
    submit = [str(JOBS_PYTHON.parent / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false"]
    job([*submit, "rossmann_jobs/train.py", *args])
    job([*submit, "rossmann_jobs/predict.py", "--model", f"{base}/model", "--features", f"{base}/features",
         "--raw", plan["raw"], "--out", f"{base}/predictions"])
    uri = f"{committed_attempt(stack, base + '/predictions')}/submission.csv"
    return {"shuffled": shuffled,
            "metrics": stack.read_json(f"{committed_attempt(stack, base + '/model')}/metrics.json"),
            "forecast": {int(row["Id"]): float(row["Sales"])
                         for row in csv.DictReader(io.StringIO(stack.read_bytes(uri).decode()))}}


def test_negative_control_a_rank_on_shuffled_labels_fails_the_comparison(shuffled_rank_run, first_run,
                                                                         dag_test_stack):
    """The comparisons above pass for the cluster run; a run with one rank's gradients pulling toward noise must
    fail them, or they could not tell a broken data-parallel run from a correct one."""
    shuffled = shuffled_rank_run["shuffled"]
    assert shuffled["shuffled_rows"] > 0 and 0 < len(shuffled["shuffled_files"]) < shuffled["train_files"]
    metrics = shuffled_rank_run["metrics"]
    assert metrics["horovod_size"] == 2 and metrics["epochs_run"] == FIRST_RUN_CONF["epochs"]
    local = first_run["summary"]["xcom"]["read_train_metrics"]["best_val_exp_rmspe"]
    gap = val_exp_rmspe_gap(metrics["best_val_exp_rmspe"], local)
    disagreement = forecast_disagreement(shuffled_rank_run["forecast"], forecast(dag_test_stack, first_run),
                                         closed_ids(dag_test_stack))
    print(f"negative control: val exp_rmspe {metrics['best_val_exp_rmspe']:.5f} vs local {local:.5f} "
          f"(gap {gap:.3f}, bound {VAL_EXP_RMSPE_REL_TOL}); forecast disagreement {disagreement:.5f} "
          f"(bound {FORECAST_AGREEMENT_RMSPE})")
    assert gap >= VAL_EXP_RMSPE_REL_TOL
    assert disagreement >= FORECAST_AGREEMENT_RMSPE


def test_s3_secret_is_not_in_spark_master_worker_or_executor_logs(cluster_run):
    secret = cluster_run["stack"].secret_key
    cluster = cluster_run["cluster"]
    files = [path for path in [*cluster.log_dir.glob("*.log"), *(cluster.state_dir / "spark").rglob("*")]
             if path.is_file()]
    assert any(path.name == "stderr" for path in files)   # the executors' own logs are among them
    assert not [path for path in files if secret in path.read_text(errors="replace")]
    assert secret not in cluster_run["output"]
