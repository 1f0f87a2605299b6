"""Storage: URI forms, the atomic commit protocol on local disk and S3, and Spark's s3a:// round trip."""
from __future__ import annotations

import pytest

from rossmann_jobs import storage


def test_spark_uri_forms(tmp_path):
    assert storage.spark_uri("s3://bucket/a/b") == "s3a://bucket/a/b"
    assert storage.spark_uri("s3a://bucket/a") == "s3a://bucket/a"
    assert storage.spark_uri(str(tmp_path)) == f"file://{tmp_path}"
    assert storage.spark_uri(f"file://{tmp_path}") == f"file://{tmp_path}"


@pytest.fixture(params=["local", "s3"])
def out_root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "out")
    return request.getfixturevalue("s3_bucket") + "/out"


def test_reader_refuses_uncommitted_output(out_root):
    attempt = storage.new_attempt_uri(out_root)
    storage.write_json(storage.join(attempt, "metadata.json"), {"half": "written"})
    with pytest.raises(storage.OutputNotCommittedError, match="no committed output"):
        storage.committed_uri(out_root)


def test_commit_publishes_attempt_and_removes_older_ones(out_root):
    first = storage.new_attempt_uri(out_root)
    storage.write_bytes(storage.join(first, "part-0"), b"first")
    storage.commit(out_root, first, {"rows": 1})
    crashed = storage.new_attempt_uri(out_root)  # a re-run that died before committing
    storage.write_bytes(storage.join(crashed, "part-0"), b"partial")
    assert storage.read_bytes(storage.join(storage.committed_uri(out_root), "part-0")) == b"first"

    second = storage.new_attempt_uri(out_root)
    storage.write_bytes(storage.join(second, "part-0"), b"second")
    manifest = storage.commit(out_root, second, {"rows": 2})

    assert manifest["files"] == ["part-0"] and manifest["summary"] == {"rows": 2}
    assert storage.committed_uri(out_root) == second
    assert storage.read_bytes(storage.join(storage.committed_uri(out_root), "part-0")) == b"second"
    remaining = storage.list_files(storage.join(out_root, "attempts"))
    assert remaining == [storage.join(second, "part-0")]


def test_upload_and_download_dir_round_trip(out_root, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("A")
    (src / "sub" / "b.bin").write_bytes(b"\x00\x01")
    storage.upload_dir(str(src), out_root + "/copy")
    dest = storage.download_dir(out_root + "/copy", str(tmp_path / "dest"))
    assert (tmp_path / "dest" / "a.txt").read_text() == "A"
    assert (tmp_path / "dest" / "sub" / "b.bin").read_bytes() == b"\x00\x01"
    assert dest == str(tmp_path / "dest")


def test_spark_reads_and_writes_s3a_on_the_s3_server(spark, s3_bucket):
    """The S3A jars are installed into pyspark and the session picks endpoint/credentials from the env."""
    uri = storage.spark_uri(s3_bucket + "/parquet/numbers")
    spark.range(100).write.mode("overwrite").parquet(uri)
    assert spark.read.parquet(uri).agg({"id": "sum"}).first()[0] == sum(range(100))
    assert any(f.endswith(".parquet") for f in storage.list_files(s3_bucket + "/parquet/numbers"))
