"""Storage: URI forms, the atomic commit protocol on local disk and S3, and every S3A path the jobs use."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from rossmann_jobs import commit_protocol as protocol
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


def test_s3_objects_carry_the_type_a_browser_needs(s3_bucket, s3_server):
    """The report's presigned link opens in a browser only if S3 serves index.html as HTML, not as a download."""
    import boto3

    client = boto3.client("s3", endpoint_url=s3_server)
    bucket = s3_bucket.removeprefix("s3://")
    for name, expected in (("report/index.html", "text/html; charset=utf-8"), ("metrics.json", "application/json"),
                           ("part-0", "application/octet-stream")):
        storage.write_bytes(f"{s3_bucket}/out/{name}", b"<html></html>")
        assert client.head_object(Bucket=bucket, Key=f"out/{name}")["ContentType"] == expected, name


def attempt_at(out_root, seconds):
    """An attempt of out_root started `seconds` after a fixed instant."""
    start = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=seconds)
    return storage.join(out_root, protocol.new_attempt_name(start))


def test_commit_publishes_attempt_and_removes_older_ones(out_root):
    first = attempt_at(out_root, 0)
    storage.write_bytes(storage.join(first, "part-0"), b"first")
    storage.commit(out_root, first, {"rows": 1})
    crashed = attempt_at(out_root, 1)  # a re-run that died before committing
    storage.write_bytes(storage.join(crashed, "part-0"), b"partial")
    assert storage.read_bytes(storage.join(storage.committed_uri(out_root), "part-0")) == b"first"

    second = attempt_at(out_root, 2)
    storage.write_bytes(storage.join(second, "part-0"), b"second")
    manifest = storage.commit(out_root, second, {"rows": 2})

    assert manifest["files"] == ["part-0"] and manifest["summary"] == {"rows": 2}
    assert storage.committed_uri(out_root) == second
    assert storage.read_bytes(storage.join(storage.committed_uri(out_root), "part-0")) == b"second"
    remaining = storage.list_files(storage.join(out_root, "attempts"))
    assert remaining == [storage.join(second, "part-0")]


def test_commit_never_removes_an_attempt_started_after_its_own(out_root):
    # Two runs for one output: the later one is still writing when the earlier one commits.
    earlier, later = attempt_at(out_root, 0), attempt_at(out_root, 5)
    storage.write_bytes(storage.join(later, "part-0"), b"later, still being written")
    storage.write_bytes(storage.join(earlier, "part-0"), b"earlier")
    storage.commit(out_root, earlier)
    assert storage.read_bytes(storage.join(later, "part-0")) == b"later, still being written"
    storage.commit(out_root, later)
    assert storage.list_files(storage.join(out_root, "attempts")) == [storage.join(later, "part-0")]


def test_older_attempts_are_told_by_their_stamps():
    names = ["attempts/20260101T000000Z-aaaaaaaa", "attempts/20260101T000001Z-bbbbbbbb",
             "attempts/20260101T000001Z-cccccccc", "attempts/20260101T000002Z-dddddddd", "attempts/odd"]
    assert protocol.older_attempts(names, "s3://b/o/" + names[1]) == [names[0]]   # same second: order unknown
    with pytest.raises(ValueError, match="is not an attempt"):
        protocol.older_attempts(names, "s3://b/o/attempts/odd")


# The manifest both sides read: the jobs write it (storage.commit), the DAG's tasks read it with the S3Hook
# (plugins/rossmann/outputs.py, tests/dag/test_plugins.py pins the same document).
PINNED_MANIFEST_KEYS = ["attempt", "committed_at", "files", "summary"]


def test_the_manifest_written_is_the_pinned_protocol_document(out_root):
    import json
    import re

    attempt = storage.new_attempt_uri(out_root)
    storage.write_bytes(storage.join(attempt, "sub", "part-0"), b"x")
    storage.commit(out_root, attempt, {"rows": 1})
    manifest = json.loads(storage.read_bytes(storage.join(out_root, "_SUCCESS")))
    assert sorted(manifest) == PINNED_MANIFEST_KEYS
    assert re.fullmatch(r"attempts/\d{8}T\d{6}Z-[0-9a-f]{8}", manifest["attempt"])
    assert manifest["files"] == ["sub/part-0"] and manifest["summary"] == {"rows": 1}
    assert storage.committed_uri(out_root) == attempt


def test_a_manifest_that_is_not_the_protocols_is_refused(out_root):
    storage.write_json(storage.join(out_root, "_SUCCESS"), {"attempt": "../elsewhere", "files": [],
                                                            "summary": {}, "committed_at": "t"})
    with pytest.raises(ValueError, match="not one under attempts/"):
        storage.committed_uri(out_root)
    storage.write_bytes(storage.join(out_root, "_SUCCESS"), b"")   # e.g. Hadoop's own empty marker
    with pytest.raises(ValueError, match="is not a JSON manifest"):
        storage.committed_uri(out_root)


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


def test_every_s3a_path_the_jobs_use_works_with_the_installed_jars(spark, s3_bucket):
    """hadoop-aws 3.3.1 + aws-java-sdk-bundle 1.11.901 beside pyspark's Hadoop 3.3.4 client (docs/security.md:
    why 3.3.1 stays): Spark's write into an attempt prefix (FileOutputCommitter renames = S3 copy + delete), the
    project's rename-free commit, a read of the committed attempt, and S3A's multipart upload."""
    import boto3

    jvm = spark.sparkContext._jvm
    assert jvm.org.apache.hadoop.util.VersionInfo.getVersion() == "3.3.4"
    s3a_jar = jvm.java.lang.Class.forName("org.apache.hadoop.fs.s3a.S3AFileSystem").getProtectionDomain() \
        .getCodeSource().getLocation().getPath()
    assert s3a_jar.endswith("hadoop-aws-3.3.1.jar"), s3a_jar

    out = f"{s3_bucket}/s3a-paths"
    attempt = storage.new_attempt_uri(out)
    # S3A's smallest part size (the bucket is new, so its file system instance is created with this setting).
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop_conf.set("fs.s3a.multipart.size", "5M")
    try:
        spark.range(1_500_000).coalesce(1).write.option("compression", "none").parquet(
            storage.spark_uri(f"{attempt}/numbers"))
        # 12 MiB through S3A's output stream straight to its key (task files are renamed, which re-copies them).
        target = jvm.org.apache.hadoop.fs.Path(storage.spark_uri(f"{attempt}/multipart.bin"))
        stream = target.getFileSystem(hadoop_conf).create(target, True)
        for index in range(12):
            stream.write(bytearray(bytes([index]) * 2**20))
        stream.close()
    finally:
        hadoop_conf.unset("fs.s3a.multipart.size")
    manifest = storage.commit(out, attempt, {"rows": 1_500_000})
    assert not any("_temporary" in name for name in manifest["files"])   # the committer's renames finished

    committed = storage.committed_uri(out)
    numbers = spark.read.parquet(storage.spark_uri(f"{committed}/numbers"))
    assert numbers.agg({"id": "sum"}).first()[0] == sum(range(1_500_000))
    bucket, _, prefix = committed.removeprefix("s3://").partition("/")
    head = boto3.client("s3", endpoint_url=storage.s3_endpoint()).head_object(Bucket=bucket,
                                                                             Key=f"{prefix}/multipart.bin")
    assert head["ContentLength"] == 12 * 2**20
    # A multipart object's ETag is "<md5 of the part md5s>-<number of parts>": 12 MiB in 5 MiB parts is 3.
    assert re.fullmatch(r'"[0-9a-f]{32}-3"', head["ETag"]), head["ETag"]
    assert storage.read_bytes(f"{committed}/multipart.bin")[::2**20] == bytes(range(12))
