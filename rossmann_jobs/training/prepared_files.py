"""The prepared train/validation files as the train job reads them: start statistics, the gate's rows (Spark)."""
from __future__ import annotations

from typing import Iterable

import numpy as np
from pyspark.sql import DataFrame, SparkSession

from rossmann_jobs import storage
from rossmann_jobs.features.spec import CONTINUOUS_COLS, LABEL_COL
from rossmann_jobs.model.architecture import TrainStatistics
from rossmann_jobs.spark_session import read_parquet
from rossmann_jobs.training.feature_set import FeatureDataError

STATISTICS_COLUMNS = [LABEL_COL, *CONTINUOUS_COLS]


def read_files(spark: SparkSession, file_uris: list[str]) -> DataFrame:
    """The Parquet files (already checked by feature_set.scan_files) as one DataFrame."""
    return read_parquet(spark, *file_uris)


def column_moments(batches: Iterable[np.ndarray]) -> tuple[int, np.ndarray, np.ndarray]:
    """(rows, mean, population variance) per column over (rows, columns) blocks, merged block by block (Chan et
    al.) in float64: exact enough for any number of rows, and memory bounded by one block."""
    count, mean, m2 = 0, None, None
    for block in batches:
        block = np.asarray(block, dtype=np.float64)
        n = block.shape[0]
        if n == 0:
            continue
        block_mean = block.mean(axis=0)
        block_m2 = ((block - block_mean) ** 2).sum(axis=0)
        if mean is None:
            count, mean, m2 = n, block_mean, block_m2
            continue
        delta, total = block_mean - mean, count + n
        mean = mean + delta * (n / total)
        m2 = m2 + block_m2 + delta ** 2 * (count * n / total)
        count = total
    if mean is None:
        return 0, np.array([]), np.array([])
    return count, mean, m2 / count


def _row_group_blocks(train_files: list[str]) -> Iterable[np.ndarray]:
    import pyarrow.parquet as pq

    for uri in train_files:
        filesys, path = storage.filesystem(uri)
        with filesys.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            for group in range(parquet.metadata.num_row_groups):
                table = parquet.read_row_group(group, columns=STATISTICS_COLUMNS)
                yield np.column_stack([table[col].to_numpy(zero_copy_only=False) for col in STATISTICS_COLUMNS])


def train_statistics(train_files: list[str]) -> TrainStatistics:
    """One pass over the train split, row group by row group, on the driver: mean label (log Sales), mean and
    variance of each continuous column. Not a Spark query: on a small deployment a cold JVM's first query cost
    20-40 s for what takes well under a second here (bench/RESULTS.md, "Fixed cost per run")."""
    rows, mean, variance = column_moments(_row_group_blocks(train_files))
    if rows == 0:
        raise FeatureDataError(f"the train files {train_files[:3]}... hold no rows")
    return TrainStatistics(float(mean[0]), tuple(float(value) for value in mean[1:]),
                           tuple(float(value) for value in variance[1:]))
