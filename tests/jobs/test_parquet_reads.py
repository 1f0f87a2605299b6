"""spark_session.read_parquet: Spark's own schema from a footer, so that a read starts no Spark job, same rows."""
from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rossmann_jobs import storage
from rossmann_jobs.spark_session import read_parquet, written_schema


def jobs_started(spark, action) -> int:
    """The number of Spark jobs `action` started (counted by job group)."""
    group = f"probe-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "read_parquet probe")
    try:
        action()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def written(spark, uri: str) -> None:
    rows = [(1, dt.date(2015, 8, 1), 5.5, "test"), (2, dt.date(2015, 8, 2), None, "validation"),
            (3, dt.date(2015, 8, 3), 7.25, "test")]
    frame = spark.createDataFrame(rows, "Id int, Date date, Sales float, split string")
    frame.write.partitionBy("split").parquet(storage.spark_uri(uri))


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path, s3_bucket):
    return str(tmp_path / "data") if request.param == "local" else f"{s3_bucket}/data"


def test_a_read_with_the_footers_schema_starts_no_spark_job_and_reads_what_spark_infers(spark, root):
    written(spark, root)
    split = storage.join(root, "split=test")
    inferred = spark.read.parquet(storage.spark_uri(split))
    assert jobs_started(spark, lambda: spark.read.parquet(storage.spark_uri(split))) >= 1   # the control
    assert jobs_started(spark, lambda: read_parquet(spark, split)) == 0
    frame = read_parquet(spark, split)
    assert frame.schema.simpleString() == inferred.schema.simpleString() == "struct<Id:int,Date:date,Sales:float>"
    assert sorted(frame.collect()) == sorted(inferred.collect())


def test_partition_directories_become_string_columns_as_spark_infers_them(spark, root):
    written(spark, root)
    frame = read_parquet(spark, root)
    assert jobs_started(spark, lambda: read_parquet(spark, root)) == 0
    assert frame.schema["split"].dataType.simpleString() == "string"
    assert sorted((row.Id, row.split) for row in frame.collect()) == [(1, "test"), (2, "validation"), (3, "test")]
    assert sorted(frame.collect()) == sorted(spark.read.parquet(storage.spark_uri(root)).collect())


def test_files_another_writer_wrote_are_left_to_sparks_inference(spark, tmp_path):
    path = tmp_path / "other" / "part-0.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"Id": pa.array([4, 5], pa.int64()), "Sales": [1.5, 2.5]}), path)
    assert written_schema([str(path.parent)]) is None
    frame = read_parquet(spark, str(path.parent))
    assert [(row.Id, row.Sales) for row in frame.orderBy("Id").collect()] == [(4, 1.5), (5, 2.5)]


def test_an_empty_directory_fails_as_spark_fails(spark, tmp_path):
    (tmp_path / "empty").mkdir()
    assert written_schema([str(tmp_path / "empty")]) is None
    with pytest.raises(Exception, match="(?i)unable to infer schema"):
        read_parquet(spark, str(tmp_path / "empty"))
