"""A job killed while writing its output leaves nothing that reads as complete; a re-run commits a clean output."""
from __future__ import annotations

import os
import time
from datetime import date

import pytest

from fixtures.tiny_drop import tiny_drop, write_drop
from rossmann_jobs import storage
from rossmann_jobs.output_layout import METADATA_FILE
from testkit.job_process import JobProcess

pytestmark = pytest.mark.slow

AS_OF = date(2015, 7, 31)


def first_file_under(directory: str) -> str | None:
    for root, _dirs, files in os.walk(directory):
        if files:
            return os.path.join(root, files[0])
    return None


def kill_once_writing_starts(job: JobProcess, attempts_dir: str, timeout_s: float) -> str:
    """SIGKILL the job's process group as soon as a file of its output attempt exists; returns that file."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and job.process.poll() is None:
        found = first_file_under(attempts_dir)
        if found:
            job.kill()
            return found
        time.sleep(0.05)
    job.kill()
    raise AssertionError(f"the job never started writing under {attempts_dir}:\n{job.output[-3000:]}")


def test_a_kill_mid_write_leaves_no_complete_output_and_a_rerun_replaces_the_orphan(spark, tmp_path):
    from rossmann_jobs.prepare import run_prepare

    raw = write_drop(str(tmp_path / "raw"), tiny_drop())
    out = str(tmp_path / "features")
    job = JobProcess("prepare", ["--raw", raw, "--out", out, "--as-of", AS_OF.isoformat(), "--num-shards", "4"])
    first_file = kill_once_writing_starts(job, os.path.join(out, "attempts"), timeout_s=300)
    assert job.process.returncode == -9

    # What the kill left: a partial attempt, and no manifest, so every reader refuses the output.
    orphan = os.path.relpath(first_file, os.path.join(out, "attempts")).split(os.sep)[0]
    assert not os.path.exists(os.path.join(out, storage.MANIFEST_NAME))
    assert not os.path.exists(os.path.join(out, "attempts", orphan, METADATA_FILE))   # written last, before commit
    with pytest.raises(storage.OutputNotCommittedError, match="no committed output"):
        storage.committed_uri(out)

    # The re-run (the task's retry) commits a complete attempt; the orphan is gone and nothing refers to it.
    metadata = run_prepare(spark, raw, out, AS_OF, num_shards=4)
    manifest = storage.read_manifest(out)
    attempt = storage.committed_uri(out)
    assert manifest["attempt"] != f"attempts/{orphan}"
    assert os.listdir(os.path.join(out, "attempts")) == [manifest["attempt"].split("/")[1]]
    assert not any(orphan in name for name in manifest["files"])
    assert sorted(manifest["files"]) == sorted(f[len(attempt) + 1:] for f in storage.list_files(attempt))
    shard_rows = {name: sum(s["rows"] for s in shards) for name, shards in metadata["shards"].items()}
    assert shard_rows == {name: metadata["row_counts"][name] for name in shard_rows}


def test_an_attempt_written_after_the_last_commit_is_never_read(tmp_path):
    out = str(tmp_path / "out")
    first = storage.new_attempt_uri(out)
    storage.write_bytes(storage.join(first, "part-0"), b"complete")
    storage.commit(out, first)
    half_written = storage.new_attempt_uri(out)
    storage.write_bytes(storage.join(half_written, "part-0"), b"partial")   # a crash would stop here
    assert storage.committed_uri(out) == first
    assert storage.read_bytes(storage.join(storage.committed_uri(out), "part-0")) == b"complete"
