"""SparkSubmitOperator that hands S3 settings from the AWS connection to spark-submit through its environment.

Credentials never pass through templated fields (application_args, conf, env_vars): those are rendered into the
UI and, on YARN, turned into --conf flags. Instead spark-submit starts with the standard AWS_* variables of the
jobs' own connection in its environment; rossmann_jobs.spark_session.s3a_conf() maps them onto fs.s3a.* inside the
job and Spark redacts *.secret.key. A connection without keys (IAM roles, instance profiles) sets nothing.

spark-submit (in client mode the Spark driver, and through Horovod the ranks) never gets the task process's whole
environment, which on an Airflow worker holds Airflow's connections (AIRFLOW_CONN_*: the identity that writes
models/ and forecast/), its keys (Fernet, JWT, API secret) and its database settings: AllowListedSparkSubmitHook
starts it with spark_submit_environment(), the allow-listed variables (SUBMIT_ENV_NAMES, SUBMIT_ENV_PREFIXES) and
the jobs' S3 settings, nothing else.
Spark settings come from configuration, so clusters differ only in connections: the project's per-job defaults
(DEFAULT_JOB_CONF), then the Spark connection's extra `spark_conf` (every job, e.g. spark.pyspark.python), then its
extra `job_conf` object of per-job settings ({"prepare": {"spark.driver.memory": "6g"}, "train": {...}}: sizing,
docs/deploy.md), then a task's own `conf`. Beneath all of them, the launch settings derived from the size of the
run's drop (rossmann_jobs/launch_settings.py: a small drop's JVMs compile with C1 only).

A job that exits with status 2 (a known input or feature error, rossmann_jobs.job_runner.run_job) fails the task
at once with its "<job> failed: <reason>" line: a retry would read the same input and fail the same way. So does a
spark-submit that cannot start with this set-up (no SPARK_HOME on the Airflow worker; cluster deploy mode on a
standalone master): a retry meets the same set-up.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

import rossmann_jobs
from rossmann.report_link import ForecastReportLink
from rossmann_jobs import launch_settings
from rossmann_jobs.features.drop_manifest import DROP_MARKER
from rossmann_jobs.job_protocol import BAD_INPUT_EXIT_CODE, FAILURE_LINE, JOBS

# The jobs' own S3 identity where the deployment gives them one (compose: aws_jobs, which cannot write models/;
# docs/deploy.md "S3 identities"), else Airflow's aws_default.
JOBS_AWS_CONN_ENV, DEFAULT_JOBS_AWS_CONN_ID = "ROSSMANN_JOBS_AWS_CONN_ID", "aws_default"
SPARK_CONF_EXTRA = "spark_conf"
JOB_CONF_EXTRA = "job_conf"
# prepare on local[N] holds the materialized feature rows of the whole history in the driver JVM: the full Rossmann
# history needs more than spark-submit's 1g default (bench/RESULTS.md, "Prepare job").
DEFAULT_JOB_CONF = {"prepare": {"spark.driver.memory": "2g"}}
_SIZING = re.compile(r"memory|cores|cpus|instances")
_EXIT_CODE = re.compile(r"Error code is: (\d+)\.")


def bad_input_reason(submit_error: str) -> str | None:
    """The job's "<job> failed: ..." line when spark-submit ended with the bad-input status, else None.

    SparkSubmitHook's error holds the exit status and the last lines of spark-submit's output, where run_job logs
    the reason after stopping Spark."""
    status = _EXIT_CODE.search(submit_error)
    if not status or int(status[1]) != BAD_INPUT_EXIT_CODE:
        return None
    lines = FAILURE_LINE.findall(submit_error)
    return lines[-1].strip() if lines else f"exit status {BAD_INPUT_EXIT_CODE} (bad input); the task log says why"


# What spark-submit prints when it cannot start any job with this worker's set-up, before a JVM runs the job, and the
# fix (docs/deploy.md): a retry would meet the same set-up.
_SET_UP_FAILURES = (
    (re.compile(r"Could not find valid SPARK_HOME[^\n]*"),
     "Set SPARK_HOME for the Airflow components to a Spark install (or the jobs environment's site-packages/pyspark), "
     "see docs/deploy.md"),
    (re.compile(r"Cluster deploy mode is currently not supported for python applications on standalone clusters"),
     "Use deploy-mode client in the Spark connection: a standalone cluster runs Python drivers in client mode only "
     "(cluster mode needs YARN or Kubernetes), see docs/deploy.md"),
)


def launch_failure_reason(submit_error: str) -> str | None:
    """Why spark-submit could not start any job on this worker, when its output says so (a set-up problem that no
    retry mends), else None."""
    for pattern, fix in _SET_UP_FAILURES:
        found = pattern.search(submit_error)
        if found is not None:
            return f"spark-submit could not start: {found[0].strip()}. {fix}, then clear the task"
    return None


def no_retry_reason(submit_error: str) -> str | None:
    """The task's failure message when a retry would fail the same way (bad input, or a set-up that cannot start
    spark-submit), else None: the task's retry policy applies."""
    reason = bad_input_reason(submit_error)
    if reason is not None:
        return f"{reason} (bad input: not retried; fix the input and clear the task)"
    set_up = launch_failure_reason(submit_error)
    return None if set_up is None else f"{set_up} (not retried)"


def default_jobs_root() -> str:
    """The folder holding rossmann_jobs/, whose entry scripts spark-submit runs unless the Variable
    rossmann_jobs_root names another: where this Airflow's rossmann_jobs is installed (the rossmann-jobs wheel's
    site-packages, or the checkout for an editable install), not a path relative to the DAG file, which a wheel
    installs elsewhere."""
    return str(Path(rossmann_jobs.__file__).resolve().parents[1])


def job_of(application: str) -> str:
    """The job a spark-submit application runs: rossmann_jobs/<job>.py."""
    job = application.rstrip("/").rsplit("/", 1)[-1].removesuffix(".py")
    if job not in JOBS:
        raise ValueError(f"application {application!r} is not one of the rossmann jobs {list(JOBS)}")
    return job


def job_spark_conf(connection_extra: dict[str, Any], job: str, conn_id: str) -> dict[str, str]:
    """The job's Spark settings from configuration: DEFAULT_JOB_CONF[job] < extra spark_conf < extra job_conf[job]."""
    cluster = connection_extra.get(SPARK_CONF_EXTRA) or {}
    per_job = connection_extra.get(JOB_CONF_EXTRA) or {}
    if not isinstance(cluster, dict):
        raise ValueError(f"connection {conn_id!r}: extra '{SPARK_CONF_EXTRA}' must be a JSON object of Spark settings, "
                         f"got {type(cluster).__name__}")
    if not isinstance(per_job, dict) or not all(isinstance(v, dict) for v in per_job.values()):
        raise ValueError(f"connection {conn_id!r}: extra '{JOB_CONF_EXTRA}' must map job names to JSON objects of "
                         f"Spark settings, e.g. {{\"prepare\": {{\"spark.driver.memory\": \"6g\"}}}}")
    unknown = sorted(set(per_job) - set(JOBS))
    if unknown:
        raise ValueError(f"connection {conn_id!r}: extra '{JOB_CONF_EXTRA}' names {unknown}, which are not jobs; "
                         f"the jobs are {list(JOBS)}")
    return {**DEFAULT_JOB_CONF.get(job, {}), **cluster, **per_job.get(job, {})}


def jobs_aws_conn_id() -> str:
    return os.environ.get(JOBS_AWS_CONN_ENV) or DEFAULT_JOBS_AWS_CONN_ID


def aws_environment(aws_conn_id: str | None) -> dict[str, str]:
    """AWS_* variables for a boto-style client from an Airflow AWS connection; only what the connection sets."""
    if not aws_conn_id:
        return {}
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    config = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3").conn_config
    endpoint = config.get_service_config("s3").get("endpoint_url") or config.endpoint_url
    candidates = {
        "AWS_ACCESS_KEY_ID": config.aws_access_key_id,
        "AWS_SECRET_ACCESS_KEY": config.aws_secret_access_key,
        "AWS_SESSION_TOKEN": config.aws_session_token,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": config.region_name,
    }
    return {name: value for name, value in candidates.items() if value}


# What spark-submit may inherit from the task process: the names below, and the names under the prefixes (except
# secret-looking ones under ROSSMANN_/HOROVOD_). Anything else, Airflow's settings and connections included, stays
# behind; the jobs' S3 settings come from their own connection (aws_environment), never from the task's AWS_*.
SUBMIT_ENV_NAMES = frozenset({
    # processes and files
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "HOSTNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TMP", "TEMP",
    # Java, Hadoop/YARN, Kerberos (the ticket cache's path, for spark-submit's --keytab/ccache set-ups)
    "JAVA_HOME", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS", "LD_LIBRARY_PATH", "HADOOP_HOME",
    "HADOOP_CONF_DIR", "HADOOP_USER_NAME", "YARN_CONF_DIR", "KRB5CCNAME", "KRB5_CONFIG",
    # Python
    "PYTHONPATH", "PYTHONHOME", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "VIRTUAL_ENV",
    # network and TLS trust (a proxy, the CA bundle of an S3 endpoint)
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "SSL_CERT_FILE",
    "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    # threads and devices of the ranks, TensorFlow's log level
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "TF_CPP_MIN_LOG_LEVEL", "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
})
SUBMIT_ENV_PREFIXES = ("LC_", "SPARK_", "PYSPARK_", "ROSSMANN_", "HOROVOD_")
# Under these prefixes a name like these is a credential (the S3 keys of compose's .env, a Spark secret handed to an
# entrypoint): left behind. Spark reads its secret from spark-defaults.conf, never from its inherited environment.
_SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|TOKEN|CREDENTIAL|PRIVATE|(?:^|_)KEY(?:_|$)")
_SECRET_CHECKED_PREFIXES = ("ROSSMANN_", "HOROVOD_", "SPARK_", "PYSPARK_")


def inherited(name: str) -> bool:
    """Whether spark-submit may inherit the task process's variable `name` (the allow-list)."""
    if name in SUBMIT_ENV_NAMES:
        return True
    if not name.startswith(SUBMIT_ENV_PREFIXES):
        return False
    return not (name.startswith(_SECRET_CHECKED_PREFIXES) and _SECRET_NAME.search(name))


def spark_submit_environment(parent: Mapping[str, str], jobs_aws: Mapping[str, str]) -> dict[str, str]:
    """spark-submit's whole environment: the allow-listed variables of `parent` (the task process's), then the jobs'
    S3 settings (`jobs_aws`: aws_environment of their connection)."""
    return {**{name: value for name, value in parent.items() if inherited(name)}, **jobs_aws}


class AllowListedSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook that starts spark-submit with spark_submit_environment() instead of a copy of os.environ.

    The provider's submit() passes its Popen keyword arguments through, and replaces `env` by os.environ plus
    env_vars only when env_vars are set: so env_vars are refused here (the DAG never sets them; they are templated,
    shown in the UI and, on YARN or Kubernetes, turned into --conf flags)."""

    jobs_aws: Mapping[str, str] = {}

    @classmethod
    def from_hook(cls, hook: SparkSubmitHook, jobs_aws: Mapping[str, str]) -> AllowListedSparkSubmitHook:
        """This class with the state of `hook` as the provider's operator built it (its connection resolved from
        every operator argument), and the jobs' S3 settings."""
        allow_listed = cls.__new__(cls)
        allow_listed.__dict__.update(vars(hook))
        allow_listed.jobs_aws = dict(jobs_aws)
        return allow_listed

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        if self._env_vars:
            raise ValueError("env_vars are not supported: spark-submit gets the allow-listed environment "
                             f"(rossmann.spark_submit.SUBMIT_ENV_NAMES), not {sorted(self._env_vars)}")
        kwargs["env"] = spark_submit_environment(os.environ, self.jobs_aws)
        return super().submit(application, **kwargs)


def read_drop_manifest(drop_uri: str, aws_conn_id: str | None) -> dict | None:
    """The drop's `_SUCCESS` manifest (s3:// through the AWS connection, else a local path); None when there is none
    or it is empty (an unverified drop)."""
    marker = f"{drop_uri.rstrip('/')}/{DROP_MARKER}"
    if marker.startswith(("s3://", "s3a://")):
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        from rossmann.outputs import s3_bucket_key

        hook = S3Hook(aws_conn_id=aws_conn_id)
        bucket, key = s3_bucket_key(marker)
        text = hook.read_key(key, bucket) if hook.check_for_key(key, bucket) else ""
    else:
        path = marker.removeprefix("file://")
        text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    try:
        return json.loads(text) if text.strip() else None
    except ValueError:
        return None


class RossmannSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of one rossmann job; S3 access from `aws_conn_id`, extra Spark conf from the Spark connection,
    launch settings from the size of the run's `drop` (its raw URI; none: Spark's defaults)."""

    template_fields = (*SparkSubmitOperator.template_fields, "drop")

    def __init__(self, *, aws_conn_id: str | None = "aws_default", drop: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id
        self.drop = drop
        self.jobs_aws: dict[str, str] = {}

    def _get_hook(self) -> AllowListedSparkSubmitHook:
        """The provider's hook for this operator's arguments, starting spark-submit with the allow-listed
        environment and the jobs' S3 settings (set by execute before the hook is made)."""
        return AllowListedSparkSubmitHook.from_hook(super()._get_hook(), self.jobs_aws)

    def derived_launch_conf(self, job: str) -> dict[str, str]:
        if not self.drop:
            return {}
        rows = launch_settings.drop_rows(read_drop_manifest(self.drop, self.aws_conn_id))
        derived = launch_settings.launch_conf(job, rows)
        self.log.info("launch settings for a drop of %s train.csv rows: %s", "unknown" if rows is None else rows,
                      derived or "Spark's defaults")
        return derived

    def execute(self, context) -> None:
        from airflow.sdk import BaseHook

        extra = BaseHook.get_connection(self._conn_id).extra_dejson
        job = job_of(self.application)
        self.conf = {**self.derived_launch_conf(job), **job_spark_conf(extra, job, self._conn_id),
                     **(self.conf or {})}
        self.log.info("Spark sizing of the %s job (connection %r, extras %r/%r): %s", job, self._conn_id,
                      SPARK_CONF_EXTRA, JOB_CONF_EXTRA,
                      {key: value for key, value in sorted(self.conf.items()) if _SIZING.search(key)} or "defaults")
        self.jobs_aws = aws_environment(self.aws_conn_id)
        self.log.info("S3 settings from connection %r passed to spark-submit via the environment: %s",
                      self.aws_conn_id, sorted(self.jobs_aws) or "none (default AWS credential chain)")
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        try:
            return super().execute(context)
        except AirflowException as error:
            reason = no_retry_reason(str(error))
            if reason is None:
                raise
            raise AirflowFailException(reason) from None


    def get_openlineage_facets_on_complete(self, task_instance):
        """The job's inputs and outputs, from its rendered arguments, for the OpenLineage provider's events."""
        from rossmann import lineage

        return lineage.operator_lineage(*lineage.job_datasets([str(arg) for arg in self.application_args or []]))


class PredictSubmitOperator(RossmannSparkSubmitOperator):
    """spark-submit of the predict job, with the "Forecast report" extra link (rossmann/report_link.py)."""

    operator_extra_links = (ForecastReportLink(),)
