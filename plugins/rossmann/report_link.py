"""The forecast report one click away: a presigned URL of the committed `report/index.html` behind the predict
task's "Forecast report" extra link, and nowhere else.

The report is one self-contained page (its plots are embedded), so the single presigned object opens in a browser
straight from S3/MinIO. A presigned URL grants read access to that one object until it expires
(`ROSSMANN_REPORT_URL_EXPIRES_S`, default one day; SigV4 allows at most 7 days, and a URL signed with temporary
credentials ends with them): anyone holding it reads the report, so it is never logged or returned as a task's XCom
value; Airflow 3 keeps it in the link's own XCom, which the UI shows to users allowed to see the task.
"""
from __future__ import annotations

import os

from airflow.sdk import BaseOperatorLink

from rossmann.outputs import OutputNotCommittedError, committed_attempt_uri, s3_bucket_key
from rossmann_jobs.output_layout import REPORT_PAGE, under

EXPIRES_ENV = "ROSSMANN_REPORT_URL_EXPIRES_S"
DEFAULT_EXPIRES_S = 24 * 3600
MAX_EXPIRES_S = 7 * 24 * 3600


def report_uri(predictions_attempt_uri: str) -> str:
    return under(predictions_attempt_uri, REPORT_PAGE)


def url_expiry_s() -> int:
    """Seconds a presigned report URL stays valid, from $ROSSMANN_REPORT_URL_EXPIRES_S."""
    text = os.environ.get(EXPIRES_ENV, str(DEFAULT_EXPIRES_S))
    if not text.isdigit() or not 0 < int(text) <= MAX_EXPIRES_S:
        raise ValueError(f"{EXPIRES_ENV}={text!r}: must be whole seconds between 1 and {MAX_EXPIRES_S} (7 days)")
    return int(text)


def presigned_url(hook, uri: str, expires_s: int) -> str:
    """A GET URL for one object, signed (SigV4, which AWS requires and which allows up to 7 days) with the hook's
    connection; the endpoint's scheme and host (MinIO, moto) as the connection sets them."""
    from botocore.config import Config

    bucket, key = s3_bucket_key(uri)
    client = hook.get_client_type(config=Config(signature_version="s3v4"))
    return client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_s)


class ForecastReportLink(BaseOperatorLink):
    """The predict task's extra link: its committed report, presigned when the task ends (Airflow 3 stores the
    link in XCom then; no credential is needed to render it). Empty when the job committed nothing."""

    name = "Forecast report"

    def get_link(self, operator, *, ti_key) -> str:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        args = list(operator.application_args)
        out_uri = args[args.index("--out") + 1]
        hook = S3Hook(aws_conn_id=operator.aws_conn_id)
        try:
            attempt = committed_attempt_uri(hook, out_uri)
        except OutputNotCommittedError:
            return ""
        return presigned_url(hook, report_uri(attempt), url_expiry_s())

