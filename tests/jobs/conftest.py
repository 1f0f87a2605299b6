"""Shared fixtures for job-side tests: a local SparkSession and a real S3 server (moto) on loopback."""
from __future__ import annotations

import os
import shlex
import socket
import sys
from pathlib import Path

import pytest

from rossmann_jobs.launch_settings import CLASS_ARCHIVE_ENV, JAVA_OPTIONS, jobs_env_class_archive, launch_conf

REPO_ROOT = Path(__file__).resolve().parents[2]
JOBS_BIN = Path(sys.executable).parent

# Spark-submitted jobs start as the DAG starts a small drop's jobs (testkit/job_process.py: C1-only JIT, from the
# jobs environment's class archive where scripts/setup_env.sh built one). The in-process session (launched from
# PYSPARK_SUBMIT_ARGS) is the other kind of JVM: one driver that runs the suite's hundreds of small queries for half
# an hour, mostly on one core. It starts from the class archive too, but with tiered JIT (Spark's default,
# launch_conf for a drop of unknown size): C2 compiles on the idle core, and the planner and the code generator run
# faster for the rest of the session. Seven in-process modules took 463 s against 668 s with C1 only
# (docs/decisions.md, "the job-side tests' JVM compiles with C1 and C2").
if jobs_env_class_archive(sys.prefix).is_file():
    os.environ.setdefault(CLASS_ARCHIVE_ENV, str(jobs_env_class_archive(sys.prefix)))
_JAVA_OPTIONS = shlex.quote(launch_conf("prepare", None).get(JAVA_OPTIONS, ""))
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-java-options {_JAVA_OPTIONS} pyspark-shell")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def spark(s3_server):
    """local[2] session; depends on s3_server so its S3A settings point at the test S3 server."""
    from rossmann_jobs.spark_session import build_spark_session

    session = build_spark_session("rossmann-tests", {"spark.master": "local[2]", "spark.sql.shuffle.partitions": "4",
                                                     "spark.ui.enabled": "false"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on 127.0.0.1 with test credentials in the environment; yields the endpoint URL."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                            "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing-key-id",
                      AWS_SECRET_ACCESS_KEY="testing-secret", AWS_DEFAULT_REGION="us-east-1")
    yield endpoint
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture()
def s3_bucket(s3_server):
    """A fresh bucket on the moto server; yields its s3:// URI."""
    import uuid

    import boto3

    name = f"test-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=name)
    return f"s3://{name}"


@pytest.fixture()
def storage_root(tmp_path, monkeypatch):
    """This test's storage root (ROSSMANN_STORAGE_ROOT, inherited by the jobs it starts): models load only from
    <tmp_path>/models/ and <tmp_path>/runs/ (rossmann_jobs/model/trust.py)."""
    from rossmann_jobs.model.trust import STORAGE_ROOT_ENV

    monkeypatch.setenv(STORAGE_ROOT_ENV, str(tmp_path))
    return str(tmp_path)


@pytest.fixture()
def horovod_binding_restored(monkeypatch):
    """Horovod's find_port references and Spark task factory as they are now, restored after the test: the train
    job replaces them process-wide (rossmann_jobs/training/network.py)."""
    import horovod.runner.common.util.network as service_network
    import horovod.runner.http.http_server as http_server
    import horovod.runner.util.network as util_network
    import horovod.spark.runner as spark_runner

    for module in (util_network, service_network, http_server):
        monkeypatch.setattr(module, "find_port", module.find_port)
    monkeypatch.setattr(spark_runner, "_make_mapper", spark_runner._make_mapper)


@pytest.fixture(scope="session")
def pit_drops(spark, tmp_path_factory):
    """The point-in-time tests' generated snapshot, prepared per (drop, mode) once for the session: the features
    tests (test_point_in_time.py) and the jobs' forecast chain (test_point_in_time_forecast.py) share them."""
    from point_in_time_drops import SEED, STORES, PreparedDrops, read_csv
    from rossmann_jobs.features.raw_schemas import RAW_FILES
    from rossmann_jobs.synth.cli import generate
    from rossmann_jobs.synth.dataset import SynthConfig

    raw = str(tmp_path_factory.mktemp("pit-synth") / "raw")
    generate(raw, SynthConfig(stores=STORES, seed=SEED))
    snapshot = {name: read_csv(os.path.join(raw, name)) for name in RAW_FILES}
    return PreparedDrops(spark, snapshot, str(tmp_path_factory.mktemp("pit-drops")))
