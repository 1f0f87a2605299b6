"""S3 outages: a job rides out a short one with logged retries, and fails clearly, in bounded time, on a long one."""
from __future__ import annotations

import re
import time
from datetime import date
from urllib.parse import urlparse

import pytest

from fault_proxy import FaultProxy
from fixtures.tiny_drop import tiny_drop, write_drop
from rossmann_jobs import storage
from rossmann_jobs.output_layout import METADATA_FILE
from testkit.job_process import JobProcess

pytestmark = pytest.mark.slow

AS_OF = date(2015, 7, 31)


@pytest.fixture()
def proxy(s3_server):
    """A fault proxy in front of the test S3 server; jobs get its address as their S3 endpoint."""
    target = urlparse(s3_server)
    fault_proxy = FaultProxy(target.hostname, target.port)
    yield fault_proxy
    fault_proxy.close()


@pytest.fixture()
def raw_drop(s3_bucket, tmp_path):
    uri = f"{s3_bucket}/raw/{AS_OF.isoformat()}"
    storage.upload_dir(write_drop(str(tmp_path / "raw"), tiny_drop()), uri)
    return uri


def prepare(raw, out, proxy, env=None, on_line=None) -> JobProcess:
    return JobProcess("prepare", ["--raw", raw, "--out", out, "--as-of", AS_OF.isoformat(), "--num-shards", "2"],
                      env={"AWS_ENDPOINT_URL": proxy.endpoint, **(env or {})}, on_line=on_line)


def test_a_short_outage_is_ridden_out_with_logged_retries(raw_drop, s3_bucket, proxy):
    out = f"{s3_bucket}/features"
    spark_phase_outage_s = 6.0

    def break_again_once_spark_reads(line):
        # A second outage while Spark's S3A client reads the CSVs (the first one hits the driver's pyarrow reads).
        if "features of every sales row" in line and ": started" in line:
            proxy.arm(spark_phase_outage_s)

    proxy.arm(10.0)       # down for 10 s from the job's first S3 request
    job = prepare(raw_drop, out, proxy, on_line=break_again_once_spark_reads)
    code = job.wait(timeout_s=420)
    assert code == 0, job.output[-4000:]
    assert len(proxy.outages) == 2, "both outages must have happened while the job ran"
    assert proxy.refused_for_s() >= 10.0 + spark_phase_outage_s - 0.5
    retries = [line for line in job.output.splitlines() if "retrying in" in line and "S3 stat" in line]
    assert retries, job.output[-4000:]
    assert re.search(r"Could(n't| not) connect to server", retries[0]), retries[0]   # pyarrow 10 / 25 wording
    metadata = storage.read_json(storage.join(storage.committed_uri(out), METADATA_FILE))
    assert metadata["row_counts"]["rejected"] == 0
    assert metadata["row_counts"]["train"] > 0 and metadata["row_counts"]["test"] > 0
    assert "testing-secret" not in job.output


def test_an_outage_longer_than_the_retry_budget_fails_clearly_and_in_bounded_time(raw_drop, s3_bucket, proxy):
    out = f"{s3_bucket}/features"
    budget_s = 8
    proxy.arm(600.0)      # far longer than the job's budget
    started = time.monotonic()
    job = prepare(raw_drop, out, proxy, env={storage.S3_RETRY_BUDGET_ENV: str(budget_s)})
    code = job.wait(timeout_s=240)
    elapsed = time.monotonic() - started
    assert code != 0
    assert f"S3 unavailable: stat {raw_drop}/train.csv failed" in job.output, job.output[-4000:]
    assert f"over the {budget_s} s retry budget (endpoint {proxy.endpoint})" in job.output
    # JVM start-up + budget + one last round of SDK retries (~6 s): far from the 600 s outage.
    assert elapsed < 150, elapsed
    assert not storage.exists(storage.join(out, storage.MANIFEST_NAME))
