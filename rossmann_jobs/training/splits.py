"""Spark views of the prepared train/validation files the train job uses: start statistics, the gate's rows."""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rossmann_jobs import storage
from rossmann_jobs.features.spec import CONTINUOUS_COLS, LABEL_COL
from rossmann_jobs.training.feature_set import FeatureDataError
from rossmann_jobs.training.model import TrainStatistics


def read_files(spark: SparkSession, file_uris: list[str]) -> DataFrame:
    """The Parquet files (already checked by feature_set.scan_files) as one DataFrame."""
    return spark.read.parquet(*[storage.spark_uri(uri) for uri in file_uris])


def train_statistics(spark: SparkSession, train_files: list[str]) -> TrainStatistics:
    """One pass over the train split: mean label (log Sales), mean and variance of each continuous column."""
    aggregates = [F.avg(LABEL_COL).alias("label")]
    aggregates += [F.avg(col).alias(f"mean_{col}") for col in CONTINUOUS_COLS]
    aggregates += [F.var_pop(col).alias(f"var_{col}") for col in CONTINUOUS_COLS]
    row = read_files(spark, train_files).agg(*aggregates).first()
    if row["label"] is None:
        raise FeatureDataError(f"the train files {train_files[:3]}... hold no rows")
    return TrainStatistics(float(row["label"]), tuple(float(row[f"mean_{col}"]) for col in CONTINUOUS_COLS),
                           tuple(float(row[f"var_{col}"]) for col in CONTINUOUS_COLS))
