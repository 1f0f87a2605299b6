"""prepare under a deliberately tiny memory setting: its aggregations, sorts and joins spill to disk and give the
same output as with plenty of memory; with too little even to spill, it fails fast (exit 2, not retried) with a
message naming the step, the sizing it ran with and the setting to raise."""
from __future__ import annotations

from datetime import date

import pandas as pd
import pytest

from rossmann_jobs import storage
from rossmann_jobs.job_protocol import BAD_INPUT_EXIT_CODE, FAILURE_LINE
from rossmann_jobs.output_layout import METADATA_FILE, TRAIN_DIR
from rossmann_jobs.synth.cli import generate
from rossmann_jobs.synth.dataset import SynthConfig
from testkit.job_process import JobProcess, event_log_conf, spilled_bytes

pytestmark = pytest.mark.slow

AS_OF = date(2015, 7, 31)
STORES = 40   # ~40,000 train.csv rows: enough to spill at the fraction below, a job of ~20 s
# spark.memory.fraction of (512 MB - Spark's 300 MB reserve) for execution and storage: 0.05 is ~10 MB for both task
# slots, where prepare's sorts and aggregations spill; at 0.002 (~0.4 MB) a hash aggregation cannot get its first
# page and the task fails even after spilling. The spilling run also takes 1 MB memory pages, which Spark itself
# picks for a pool that small: with the project's 4 MB default (spark_session.DEFAULT_CONF, sized for 1 GB and up) a
# hash aggregation there failed in 6 of 10 runs instead of spilling; with 1 MB pages it spilled 3.4 MB and passed 5
# of 5.
SPILLING, STARVED = "0.05", "0.002"
TIGHT_PAGE_SIZE = "1m"
TIGHT_STORAGE_FRACTION = "0.1"


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("memory") / "raw")
    generate(folder, SynthConfig(stores=STORES, seed=11))
    return folder


def prepare(raw: str, out: str, memory_fraction: str | None, event_log) -> JobProcess:
    conf = {"spark.driver.memory": "512m", **event_log_conf(event_log)}
    if memory_fraction:
        conf["spark.memory.fraction"] = memory_fraction
    if memory_fraction == SPILLING:
        conf["spark.buffer.pageSize"] = TIGHT_PAGE_SIZE
        conf["spark.memory.storageFraction"] = TIGHT_STORAGE_FRACTION
    job = JobProcess("prepare", ["--raw", raw, "--out", out, "--as-of", AS_OF.isoformat(), "--num-shards", "2"],
                     spark_conf=conf)
    job.wait(timeout_s=300)
    return job


def train_rows(out: str) -> pd.DataFrame:
    frame = pd.read_parquet(storage.join(storage.committed_uri(out), TRAIN_DIR))
    return frame.sort_values(["StoreId", "Date"]).reset_index(drop=True)


def test_prepare_spills_under_tight_memory_and_writes_the_same_features(spark, raw, tmp_path):
    from rossmann_jobs.prepare import run_prepare

    roomy = str(tmp_path / "roomy")
    run_prepare(spark, raw, roomy, AS_OF, num_shards=2)   # the test session's own, default memory

    tight = str(tmp_path / "tight")
    job = prepare(raw, tight, SPILLING, tmp_path / "events")
    assert job.process.returncode == 0, job.output[-4000:]
    spilled = spilled_bytes(tmp_path / "events")
    assert spilled["disk_spilled"] > 0, spilled   # it completed by spilling, not by having the memory

    tight_meta = storage.read_json(storage.join(storage.committed_uri(tight), METADATA_FILE))
    roomy_meta = storage.read_json(storage.join(storage.committed_uri(roomy), METADATA_FILE))
    assert tight_meta["row_counts"] == roomy_meta["row_counts"]
    assert tight_meta["vocabularies"] == roomy_meta["vocabularies"]
    assert tight_meta["max_sales"] == roomy_meta["max_sales"]
    pd.testing.assert_frame_equal(train_rows(tight), train_rows(roomy))


def test_prepare_without_memory_to_spill_fails_fast_naming_step_sizing_and_setting(raw, tmp_path):
    out = str(tmp_path / "starved")
    job = prepare(raw, out, STARVED, tmp_path / "events")
    assert job.process.returncode == BAD_INPUT_EXIT_CODE, job.output[-4000:]   # deterministic: not retried
    reason = FAILURE_LINE.findall(job.output)[-1]
    assert reason.startswith("prepare failed: Spark ran out of memory during 'prepare, "), reason
    assert "Unable to acquire" in reason   # what Spark said
    assert "spark.driver.memory=512m" in reason and f"spark.memory.fraction={STARVED}" in reason   # what it had
    assert '"job_conf": {"prepare": {"spark.driver.memory"' in reason   # what to raise, and where
    assert not storage.exists(storage.join(out, storage.MANIFEST_NAME))   # nothing committed


def test_only_out_of_memory_errors_get_the_sizing_message():
    from rossmann_jobs.job_runner import memory_error

    conf = {"spark.master": "local[2]", "spark.driver.memory": "2g", "spark.app.name": "rossmann-prepare"}
    assert memory_error("prepare", RuntimeError("Connection refused: s3"), conf, ["prepare"]) is None
    spark_said = ("An error occurred while calling o91.collectToPython.\n: org.apache.spark.SparkException: Job "
                  "aborted: org.apache.spark.memory.SparkOutOfMemoryError: No enough memory for aggregation\n\tat x")
    message = str(memory_error("train", RuntimeError(spark_said), conf, ["train", "gate scores"]))
    assert message.startswith("Spark ran out of memory during 'train, gate scores' (No enough memory for aggregation)")
    assert "spark.master=local[2], spark.driver.memory=2g." in message and "spark.app.name" not in message
    assert '{"job_conf": {"train": {"spark.driver.memory": "4g"' in message
