"""SparkSubmitOperator that hands S3 settings from the AWS connection to spark-submit through its environment.

Credentials never pass through templated fields (application_args, conf, env_vars): those are rendered into the
UI and, on YARN, turned into --conf flags. Instead execute() sets the standard AWS_* variables in the task
process, which spark-submit inherits; rossmann_jobs.spark_session.s3a_conf() maps them onto fs.s3a.* inside the
job and Spark redacts *.secret.key. A connection without keys (IAM roles, instance profiles) sets nothing.
Extra Spark settings for every job (e.g. spark.pyspark.python) come from the Spark connection's extra
`spark_conf` object, so clusters differ only in connections.
"""
from __future__ import annotations

import os
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

SPARK_CONF_EXTRA = "spark_conf"


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


class RossmannSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of one rossmann job; S3 access from `aws_conn_id`, extra Spark conf from the Spark connection."""

    def __init__(self, *, aws_conn_id: str | None = "aws_default", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id

    def execute(self, context) -> None:
        from airflow.sdk import BaseHook

        connection_conf = BaseHook.get_connection(self._conn_id).extra_dejson.get(SPARK_CONF_EXTRA) or {}
        if not isinstance(connection_conf, dict):
            raise ValueError(f"connection {self._conn_id!r}: extra '{SPARK_CONF_EXTRA}' must be a JSON object "
                             f"of Spark settings, got {type(connection_conf).__name__}")
        self.conf = {**connection_conf, **(self.conf or {})}
        aws_env = aws_environment(self.aws_conn_id)
        os.environ.update(aws_env)
        self.log.info("S3 settings from connection %r passed to spark-submit via the environment: %s",
                      self.aws_conn_id, sorted(aws_env) or "none (default AWS credential chain)")
        return super().execute(context)
