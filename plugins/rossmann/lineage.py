"""OpenLineage datasets of the DAG's tasks, for the OpenLineage provider's events.

Every dataset is a committed output or a drop named by its S3 URI as the tasks pass it through XCom (OpenLineage's
S3 naming: namespace `s3://<bucket>`, name the key without its trailing slash), so the events of one run chain
from the raw drop to the features, the model, the forecast and its published copy. The Spark jobs' datasets come
from their spark-submit arguments; a Python task reports what it read and wrote through the hook lineage collector.
"""
from __future__ import annotations

from typing import Any, Sequence

# The flags of the jobs' command lines (rossmann_jobs/*.py main()) that name what a job reads and what it writes.
JOB_INPUT_FLAGS = ("--raw", "--features", "--model", "--trained-model", "--champion-model", "--warm-start-model",
                   "--forecasts", "--scores")
JOB_OUTPUT_FLAGS = ("--out",)


def s3_bucket_and_key(uri: str) -> tuple[str, str]:
    """(bucket, key without a trailing slash) of an s3:// or s3a:// URI."""
    scheme, separator, rest = uri.partition("://")
    if scheme not in ("s3", "s3a") or not separator or not rest.split("/", 1)[0]:
        raise ValueError(f"not an S3 URI: {uri!r}")
    bucket, _, key = rest.partition("/")
    return bucket, key.rstrip("/")


def dataset_name(uri: str) -> tuple[str, str]:
    """The OpenLineage (namespace, name) of an S3 URI, or of a local path (file://, for a laptop's own files)."""
    if "://" not in uri or uri.startswith("file://"):
        return "file", uri.removeprefix("file://").rstrip("/")
    bucket, key = s3_bucket_and_key(uri)
    return f"s3://{bucket}", key or "/"


def job_datasets(application_args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the URIs a job reads, the URIs it writes) from its rendered arguments; empty values (no champion, a cold
    start) are left out."""
    inputs, outputs = [], []
    for flag, value in zip(application_args, list(application_args[1:]) + [""]):
        if value and not value.startswith("--"):
            if flag in JOB_INPUT_FLAGS:
                inputs.append(value)
            elif flag in JOB_OUTPUT_FLAGS:
                outputs.append(value)
    return inputs, outputs


def operator_lineage(inputs: Sequence[str], outputs: Sequence[str]):
    """The provider's OperatorLineage of these URIs (for an operator's get_openlineage_facets_on_complete)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    def datasets(uris):
        return [Dataset(namespace=namespace, name=name) for namespace, name in map(dataset_name, uris)]

    return OperatorLineage(inputs=datasets(inputs), outputs=datasets(outputs))


def report_task_lineage(context: Any, inputs: Sequence[str], outputs: Sequence[str]) -> None:
    """Record what a Python task read and wrote with the hook lineage collector, which the OpenLineage provider
    turns into the task's event datasets (context: the hook that did the reading and writing). A no-op where
    lineage is not collected."""
    from airflow.providers.common.compat.lineage.hook import get_hook_lineage_collector

    collector = get_hook_lineage_collector()
    for uri in inputs:
        collector.add_input_asset(context=context, uri=_asset_uri(uri))
    for uri in outputs:
        collector.add_output_asset(context=context, uri=_asset_uri(uri))


def _asset_uri(uri: str) -> str:
    bucket, key = s3_bucket_and_key(uri)
    return f"s3://{bucket}/{key}"
