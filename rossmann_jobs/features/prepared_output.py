"""prepare's outputs written: the splits as Parquet shards of near-equal row counts and rejected/ as JSON, each
split checked against its classified row count, all under one attempt prefix (committed afterwards)."""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from rossmann_jobs import storage
from rossmann_jobs.features import encode
from rossmann_jobs.features.spec import STORE_ID_COL
from rossmann_jobs.features.validate import AccountingError
from rossmann_jobs.job_runner import timed
from rossmann_jobs.output_layout import REJECTED_DIR
from rossmann_jobs.spark_session import concurrently


def write_shards(frame: DataFrame, uri: str, num_shards: int) -> list[dict[str, Any]]:
    """num_shards Parquet files of near-equal row counts, so rank r can read files[r::size].

    Hashing the unique (StoreId, Date) key balances the files (within a fraction of a percent at full scale) and,
    unlike round-robin, needs no sort to be deterministic.
    """
    frame.repartition(num_shards, STORE_ID_COL, "Date").write.mode("errorifexists").parquet(storage.spark_uri(uri))
    return parquet_file_rows(uri)


def parquet_file_rows(uri: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    shards = []
    for file_uri in storage.parquet_files(uri):
        filesys, path = storage.filesystem(file_uri)
        with filesys.open_input_file(path) as handle:
            shards.append({"file": file_uri[len(uri.rstrip("/")) + 1:],
                           "rows": pq.ParquetFile(handle).metadata.num_rows})
    return shards


def write_outputs(encoded: DataFrame, quarantine: DataFrame, attempt: str, num_shards: int,
                  split_rows: dict[str, int], timings: dict[str, float]) -> dict[str, list[dict[str, Any]]]:
    """Write the splits (checking each against its classified row count) and rejected/ under attempt, at once."""
    def split_writer(name: str):
        def write() -> list[dict[str, Any]]:
            with timed(f"write {name} split", timings):
                # The filter on the outcome goes below the encoding's lookups: each split encodes its own rows.
                shards = write_shards(encode.encoded_split(encoded, name), storage.join(attempt, name), num_shards)
            written = sum(shard["rows"] for shard in shards)
            if written != split_rows[name]:
                raise AccountingError(f"{name} split: {written} rows written but {split_rows[name]} classified.")
            return shards
        return write

    def write_rejected() -> None:
        with timed("write rejected rows", timings):
            # repartition, not coalesce: coalesce(1) would scan every materialized row in one task.
            quarantine.repartition(1).write.mode("errorifexists").json(
                storage.spark_uri(storage.join(attempt, REJECTED_DIR)))

    *shards, _ = concurrently(*[split_writer(name) for name in encode.SPLIT_COLUMNS], write_rejected)
    return dict(zip(encode.SPLIT_COLUMNS, shards))
