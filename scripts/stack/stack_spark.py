"""A Spark standalone cluster on loopback: a master and workers, for running the jobs as on a real cluster."""
from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator

from stack_processes import running_pid, start_process, stop_processes, wait_http
from stack_state import JOBS_BIN, Stack, free_port

DEFAULT_SPARK_PORT = 7077
# Where a job's executors unpack the packed executor environment (spark.archives "<archive>#env").
EXECUTOR_ENV_ALIAS = "env"
# What a node's environment must not carry over from this machine's set-up: the workers stand for nodes with Java,
# a plain Python 3.11 and a Spark distribution only.
PYTHON_ENV_VARIABLES = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


def spark_distribution() -> Path:
    """The Spark the workers run: the distribution inside the jobs environment's pyspark package (its bin/ and
    jars/), used as SPARK_HOME as a node's own Spark install would be."""
    return next(JOBS_BIN.parent.glob("lib/python3*/site-packages/pyspark"))


def node_env() -> dict[str, str]:
    """A worker's environment: this machine's, less the jobs venv (PATH entries under .venvs, Python variables),
    plus SPARK_HOME. Executors then get a Python only from the job's settings (spark.pyspark.python)."""
    venvs = JOBS_BIN.parent.parent
    path = [entry for entry in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
            if entry and not Path(entry).resolve().is_relative_to(venvs.resolve())]
    env = {key: value for key, value in os.environ.items() if key not in PYTHON_ENV_VARIABLES}
    return {**env, "PATH": os.pathsep.join(path), "SPARK_HOME": str(spark_distribution()),
            "SPARK_LOCAL_IP": "127.0.0.1"}


def spark_master_url(stack: Stack) -> str | None:
    port = stack.read_state("spark-master.port")
    return f"spark://127.0.0.1:{port}" if port and running_pid(stack, "spark-master") else None


def spark_cluster_status(stack: Stack) -> dict:
    """The master's own view (its web UI's JSON): workers with their state, cores and memory."""
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.read_state('spark-master.webui')}/json", timeout=10) as r:
        return json.load(r)


def start_spark_cluster(stack: Stack, workers: int = 2, cores: int = 1, memory: str = "2g",
                        port: int | None = None, timeout_s: float = 180) -> str:
    """A Spark standalone master and `workers` workers on 127.0.0.1, from the jobs environment's Spark
    distribution but without its Python (node_env); returns the master URL once every worker has registered. Each
    worker offers `cores` cores and `memory`."""
    if (url := spark_master_url(stack)) is not None:
        return url
    env = node_env()
    spark_class = str(spark_distribution() / "bin" / "spark-class")
    port, webui = free_port(port or DEFAULT_SPARK_PORT), free_port()
    start_process(stack, "spark-master", [spark_class, "org.apache.spark.deploy.master.Master", "--host",
                                          "127.0.0.1", "--port", str(port), "--webui-port", str(webui)], env)
    stack.write_state("spark-master.port", str(port))
    stack.write_state("spark-master.webui", str(webui))
    stack.write_state("spark-workers", str(workers))
    url = f"spark://127.0.0.1:{port}"
    wait_http(f"http://127.0.0.1:{webui}/json", timeout_s, "spark-master", stack)
    for index in range(1, workers + 1):
        work_dir = spark_worker_dir(stack, index)
        work_dir.mkdir(parents=True, exist_ok=True)
        start_process(stack, f"spark-worker-{index}",
                      [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores",
                       str(cores), "--memory", memory, "--webui-port", str(free_port()), "--work-dir", str(work_dir),
                       url], env)
    deadline = time.monotonic() + timeout_s
    while (alive := spark_cluster_status(stack).get("aliveworkers", 0)) < workers:
        if time.monotonic() > deadline:
            logs = "\n".join(f"{name}: {(stack.log_dir / f'{name}.log').read_text(errors='replace')[-1500:]}"
                             for name in ["spark-master"] + [f"spark-worker-{i}" for i in range(1, workers + 1)])
            raise RuntimeError(f"only {alive} of {workers} Spark workers registered with {url} within "
                               f"{timeout_s:.0f} s:\n{logs}")
        time.sleep(1)
    return url


def spark_worker_dir(stack: Stack, index: int) -> Path:
    """Where worker `index` (1-based) puts its executors: <dir>/<application id>/<executor id>/."""
    return stack.state_dir / "spark" / f"worker-{index}"


def stop_spark_cluster(stack: Stack) -> list[str]:
    """Workers first (their executors are in their process groups), then the master."""
    workers = int(stack.read_state("spark-workers") or 0)
    stopped = stop_processes(stack, [f"spark-worker-{index}" for index in range(1, workers + 1)])
    return stopped + stop_processes(stack, ["spark-master"])


@contextlib.contextmanager
def running_spark_cluster(stack: Stack, workers: int = 2, cores: int = 1, memory: str = "2g") -> Iterator[str]:
    """start_spark_cluster for a with block: yields the master URL and stops the cluster on the way out, whether
    the block failed or not."""
    try:
        yield start_spark_cluster(stack, workers, cores, memory)
    finally:
        stop_spark_cluster(stack)


def spark_cluster_conf(stack: Stack, executor_memory: str = "1g",
                       executor_env_archive: Path | None = None) -> dict[str, str]:
    """Settings for jobs on this cluster: one executor per worker core, all cores for one application. With
    executor_env_archive (scripts/setup_env.sh --executor-env-archive), every executor runs the Python that
    archive holds, unpacked in its work dir (docs/deploy.md, option 3), and the driver keeps the jobs venv's."""
    status = spark_cluster_status(stack)
    shipped = {} if executor_env_archive is None else {
        "spark.archives": f"{executor_env_archive}#{EXECUTOR_ENV_ALIAS}",
        "spark.pyspark.python": f"./{EXECUTOR_ENV_ALIAS}/bin/python",
        "spark.pyspark.driver.python": str(JOBS_BIN / "python")}
    return {"spark.cores.max": str(status["cores"]), "spark.executor.cores": "1",
            "spark.executor.memory": executor_memory, **shipped}
