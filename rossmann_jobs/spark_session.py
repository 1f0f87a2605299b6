"""The one SparkSession builder every job uses (S3A settings), stage-progress logging and the Spark tactics the jobs
share; the job shell around them (run_job, timed, exit codes) is job_runner.py."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

import rossmann_jobs
from rossmann_jobs.job_protocol import configure_logging
from rossmann_jobs.storage import s3_endpoint

log = logging.getLogger("rossmann")

AWS_ENV_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION")

# Defaults only: anything set through spark-submit --conf (i.e. the Airflow connection / DAG) wins.
DEFAULT_CONF = {
    "spark.master": "local[2]",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "16",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.parquet.compression.codec": "snappy",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "2g",
    # prepare materializes every feature row (spark_session.materialized): storage may then fill the unified memory,
    # and the blocks a running task reads cannot be evicted for its own aggregation. Smaller blocks (at least 8
    # partitions after AQE's coalescing) and 4 MB memory pages (default: up to 64 MB, 32 MB with a 2g driver) keep
    # an aggregation's first page obtainable: at 10x the stores, a 2g prepare failed 1 run in 4 with "No enough
    # memory for aggregation" before, and none in 7 after, at the same speed (bench/RESULTS.md, "Scaling"). For an
    # execution pool of a few MB (spark.memory.fraction far below its 0.6) Spark would pick 1 MB pages: set that too.
    "spark.sql.adaptive.coalescePartitions.minPartitionNum": "8",
    "spark.buffer.pageSize": "4m",
    # HotSpot never JIT-compiles a method of more than 8,000 bytes of bytecode: a whole-stage-generated stage above
    # it would run interpreted. At this limit Spark runs such a stage operator by operator instead (each with its
    # own small generated code), as the Spark docs recommend on HotSpot. The fused feature stage crossed it with
    # the origin features: tests/jobs/test_prepare_job.py lists the stages that fall back.
    "spark.sql.codegen.hugeMethodLimit": "8000",
}

# S3A (hadoop-aws 3.3) retries, explicit so a short S3 outage is ridden out and a long one fails in bounded time:
# the AWS SDK retries each request 3 times (~1 s); S3A then retries the operation 6 times, retry n after 1 s x a
# random 1 .. 2^(n+1) - 1 (hadoop's exponential back-off): ~60 s in all on average, 2 min at most. An unreachable
# endpoint fails to connect within 5 s; a stalled connection times out after 60 s (hadoop's default is 200 s).
S3A_RETRY_CONF = {
    "spark.hadoop.fs.s3a.attempts.maximum": "3",
    "spark.hadoop.fs.s3a.retry.limit": "6",
    "spark.hadoop.fs.s3a.retry.interval": "1s",
    "spark.hadoop.fs.s3a.connection.establish.timeout": "5000",
    "spark.hadoop.fs.s3a.connection.timeout": "60000",
}


def s3a_conf() -> dict[str, str]:
    """S3A settings derived from the standard AWS environment variables (set from the Airflow connection)."""
    conf = {"spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "spark.hadoop.fs.s3a.fast.upload": "true", **S3A_RETRY_CONF}
    endpoint = s3_endpoint()
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https")).lower()
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        # Spark redacts *.access.key / *.secret.key in its UI and event logs (spark.redaction.regex).
        conf["spark.hadoop.fs.s3a.access.key"] = os.environ["AWS_ACCESS_KEY_ID"]
        conf["spark.hadoop.fs.s3a.secret.key"] = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
        provider = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        if os.environ.get("AWS_SESSION_TOKEN"):
            conf["spark.hadoop.fs.s3a.session.token"] = os.environ["AWS_SESSION_TOKEN"]
            provider = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = provider
    # Executors (and the Horovod ranks inside them) also reach S3 directly through pyarrow; on a cluster their
    # environment is the worker's, not ours, so forward the same variables. Spark redacts *SECRET* values.
    for var in AWS_ENV_VARS:
        if os.environ.get(var):
            conf[f"spark.executorEnv.{var}"] = os.environ[var]
    return conf


def build_spark_session(app_name: str, extra_conf: dict[str, str] | None = None):
    """Create (or reuse) the SparkSession; defaults fill only keys that spark-submit did not set.

    Launch settings cannot come from here: the driver JVM is already running when this conf is read (started by
    spark-submit, or in-process by _ensure_initialized from PYSPARK_SUBMIT_ARGS), so spark.driver.memory must be
    given to spark-submit (--driver-memory / --conf) or in PYSPARK_SUBMIT_ARGS. spark.master and the other
    SparkContext settings apply only when no SparkContext runs yet; a reused session keeps its own.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    configure_logging()
    # A session created in-process (tests, notebooks) ignores spark.pyspark.python: PySpark's SparkContext takes
    # the workers' interpreter from this variable, else a bare `python3` without this environment's packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    SparkContext._ensure_initialized()
    submitted = SparkConf()  # picks up spark-submit's --conf values
    wanted = {**DEFAULT_CONF, "spark.pyspark.python": sys.executable, **s3a_conf(), **(extra_conf or {})}
    builder = SparkSession.builder.appName(app_name)
    for key, value in wanted.items():
        if not submitted.contains(key) or key in (extra_conf or {}):
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("ROSSMANN_SPARK_LOG_LEVEL", "WARN"))
    # Which job code runs: the installed wheel, a --py-files archive or a checkout (docs/deploy.md).
    log.info("Spark %s master=%s app=%s defaultParallelism=%s rossmann_jobs %s from %s", spark.version,
             spark.sparkContext.master, app_name, spark.sparkContext.defaultParallelism, rossmann_jobs.__version__,
             os.path.dirname(rossmann_jobs.__file__))
    return spark


@contextlib.contextmanager
def stage_progress(spark, interval_s: float = 10.0) -> Iterator[None]:
    """Log active Spark stages (tasks done/total) every interval, so long jobs show progress in Airflow logs."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(interval_s):
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info:
                    log.info("stage %d '%s': %d/%d tasks done, %d running", stage_id, info.name[:60],
                             info.numCompletedTasks, info.numTasks, info.numActiveTasks)

    thread = threading.Thread(target=poll, name="stage-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()


# --- Spark tactics the jobs share ---------------------------------------------------------------------------

def materialized(frame):
    """frame computed once and kept as rows on the executors (memory, else local disk), its lineage cut.

    Not cache(): building Spark's compressed columnar cache of the ~45 feature columns cost more than computing
    them (bench/RESULTS.md, "Prepare job"), and every later query would re-plan the whole feature pipeline. The
    price: a lost executor loses its blocks, and the job fails instead of recomputing them (Airflow retries it).
    """
    return frame.localCheckpoint(eager=True)


def release(frame) -> None:
    """Free the blocks of a materialized frame now, rather than when the JVM's garbage collector finds it."""
    frame._jdf.queryExecution().logical().rdd().unpersist(False)


@contextlib.contextmanager
def held_frames() -> Iterator[Callable[[Any], Any]]:
    """A hold(frame) that materializes frame (materialized) and releases it when the block ends, error or not."""
    frames: list[Any] = []

    def hold(frame):
        frames.append(materialized(frame))
        return frames[-1]

    try:
        yield hold
    finally:
        for frame in frames:
            release(frame)


def concurrently(*actions: Callable[[], Any]) -> list[Any]:
    """Run Spark actions from driver threads at once; their results (or first error) in order.

    Their jobs share the executors' task slots, so one job's last tasks and the driver's planning of the next
    no longer leave cores idle (several small jobs follow the feature pass).
    """
    with ThreadPoolExecutor(max_workers=len(actions)) as pool:
        futures = [pool.submit(action) for action in actions]
        return [future.result() for future in futures]


# Where Spark records a DataFrame's exact schema in the footer of every Parquet file it writes.
SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"


def written_schema(uris: list[str]):
    """The Spark schema recorded in the footer of the first data file under the URIs (read on the driver: one
    listing and one ranged read), with each partition directory's column (name=value) appended as a string; None
    when there is no data file or its writer was not Spark."""
    import pyarrow.parquet as pq
    from pyspark.sql.types import StringType, StructField, StructType

    from rossmann_jobs import storage

    first = None
    for uri in uris:
        candidates = [uri] if uri.endswith(".parquet") else storage.parquet_files(uri)
        # Spark skips files named _* or .* when it reads: the schema comes from a file it reads.
        files = [path for path in candidates if not path.rsplit("/", 1)[-1].startswith(("_", "."))]
        if files:
            first, relative = files[0], files[0][len(uri.rstrip("/")):]
            break
    if first is None:
        return None
    filesys, path = storage.filesystem(first)
    footer = storage.with_retries("read the footer of", first,
                                  lambda: pq.read_metadata(path, filesystem=filesys)).metadata or {}
    if SPARK_SCHEMA_KEY not in footer:
        return None
    schema = StructType.fromJson(json.loads(footer[SPARK_SCHEMA_KEY]))
    for directory in relative.strip("/").split("/")[:-1]:
        name, equals, _ = directory.partition("=")
        if equals and name not in schema.fieldNames():
            schema = schema.add(StructField(name, StringType()))
    return schema


def read_parquet(spark, *uris: str):
    """The Parquet data under the URIs (directories or files written by Spark) as one DataFrame.

    Given the schema Spark recorded in a footer, reading starts no Spark job; left to infer it, Spark runs one job
    per read to open that same footer (a few tenths of a second on a small job: the score job reads one directory per
    forecast it scores, 48 a day in steady state). Like Spark's own inference without mergeSchema, one file's
    schema stands for all; data not written by Spark is left to Spark's inference.
    """
    from rossmann_jobs import storage

    schema = written_schema(list(uris))
    reader = spark.read if schema is None else spark.read.schema(schema)
    return reader.parquet(*[storage.spark_uri(uri) for uri in uris])
