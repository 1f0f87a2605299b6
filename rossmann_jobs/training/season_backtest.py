"""The calendar-matched backtest the quality gate reads: the day's training recipe replayed a year earlier.

A model is validated on the 48 days up to D, which never hold the season its horizon D+1 .. D+48 is in (the autumn
rise, the run-up to Christmas, the weeks after it). The backtest makes the year-earlier copy of the day's forecast:
origin D' = D - 364 (52 weeks: the same weekdays), a model trained the same way on the prepared rows dated up to
D' - 48, its best epoch chosen on (D' - 48, D'] as the day's model's is on (D - 48, D], and scored with the naive
seasonal baseline fitted up to D' on the year-earlier horizon (D', D' + 48], which neither has seen. Every row read
is dated <= D (the day's prepared train and validation splits), each row's features are those prepare gave it
(sales up to its own origin only). The gate refuses the network for the date when it loses to naive there.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rossmann_jobs import storage
from rossmann_jobs.features.encode import AS_LAST_TRAINED_COLS, last_trained_values
from rossmann_jobs.features.recent_level import ORIGIN_BLOCK_DAYS
from rossmann_jobs.training.feature_set import FeatureSet
from rossmann_jobs.training.prepared_files import read_files

SEASON_LAG_DAYS = 364               # 52 weeks: the year-earlier origin falls on the same weekday
# The replay is the day's recipe only when its history holds every season once, as the day's model's does: with 195
# days (origin 2013-09-01) the replayed network lost to naive where the day's beat it by 21 % (docs/decisions.md).
DEFAULT_MIN_TRAIN_DAYS = 365
SPLITS = ("train", "validation", "window")
SPLIT_COL = "backtest_split"     # the split a prepared row falls in; the written files' folder name


@dataclass(frozen=True)
class BacktestWindows:
    """The year-earlier copy of the day's windows: train up to train_end, choose the epoch on (train_end, origin],
    score on (origin, window_end]."""
    origin: date
    train_end: date
    window_end: date

    @classmethod
    def for_as_of(cls, as_of: date, horizon_days: int = ORIGIN_BLOCK_DAYS) -> BacktestWindows:
        origin = as_of - timedelta(days=SEASON_LAG_DAYS)
        return cls(origin, origin - timedelta(days=horizon_days), origin + timedelta(days=horizon_days))

    def describe(self) -> dict[str, str]:
        return {"origin": self.origin.isoformat(), "train_end": self.train_end.isoformat(),
                "window_start": (self.origin + timedelta(days=1)).isoformat(),
                "window_end": self.window_end.isoformat()}


def split_of(windows: BacktestWindows) -> F.Column:
    """The backtest split of a prepared row by its date; null for the rows after the window (not read)."""
    day = F.col("Date").cast("date")
    return (F.when(day <= F.lit(windows.train_end), F.lit("train"))
            .when(day <= F.lit(windows.origin), F.lit("validation"))
            .when(day <= F.lit(windows.window_end), F.lit("window")))


def as_last_trained(rows: DataFrame, vocabularies: dict[str, list], first_date: date, train_end: date) -> DataFrame:
    """rows with the Year and Week indices past the backtest's last train row read as that row's, as prepare does
    for the day's own horizon (features/encode.py): an embedding training never moved forecasts nothing."""
    last = last_trained_values(first_date, train_end)
    capped = {}
    for column in AS_LAST_TRAINED_COLS:
        known = [value for value in vocabularies[column] if value <= last[column]]
        if known:   # index of the latest known value: vocabularies are sorted, index i + 1 for value i
            capped[column] = F.least(F.col(column), F.lit(len(known)).cast("int"))
    return rows.withColumns(capped)


def backtest_rows(spark: SparkSession, features: FeatureSet, windows: BacktestWindows) -> DataFrame:
    """Every prepared row dated up to the backtest window's end (train and validation splits: all dated <= D), with
    its backtest split (SPLIT_COL)."""
    rows = read_files(spark, features.train_files + features.validation_files)
    return rows.withColumn(SPLIT_COL, split_of(windows)).filter(F.col(SPLIT_COL).isNotNull())


def write_splits(rows: DataFrame, out_uri: str, num_files: int) -> dict[str, list[str]]:
    """The three splits as Parquet under out_uri (replaced: a retry writes them again), in one pass over the rows
    (a folder per split, up to num_files files each); each split's files."""
    (rows.repartition(num_files).write.partitionBy(SPLIT_COL).mode("overwrite")
     .parquet(storage.spark_uri(out_uri)))
    return {name: storage.parquet_files(storage.join(out_uri, f"{SPLIT_COL}={name}")) for name in SPLITS}


@dataclass(frozen=True)
class BacktestViews:
    """What the train job trains on (train + validation) and what the gate's scores read (history + window)."""
    training: FeatureSet
    scoring: FeatureSet
    facts: dict[str, Any]


def prepare_views(spark: SparkSession, features: FeatureSet, out_uri: str, as_of: date,
                  min_train_days: int = DEFAULT_MIN_TRAIN_DAYS) -> BacktestViews | dict[str, Any]:
    """The backtest's feature sets, written under out_uri; or, where the history before the year-earlier origin is
    too short, the facts of a backtest that cannot run (available False, reason)."""
    windows = BacktestWindows.for_as_of(as_of)
    facts: dict[str, Any] = {"lag_days": SEASON_LAG_DAYS, **windows.describe()}
    rows = backtest_rows(spark, features, windows)
    spans = {row[SPLIT_COL]: (row["first"], row["rows"]) for row in
             rows.groupBy(SPLIT_COL).agg(F.min(F.col("Date").cast("date")).alias("first"),
                                          F.count(F.lit(1)).alias("rows")).collect()}
    counts = {name: spans.get(name, (None, 0))[1] for name in SPLITS}
    facts["rows"] = counts
    first = spans.get("train", (None, 0))[0]
    train_days = (windows.train_end - first).days + 1 if first else 0
    if train_days < min_train_days or not counts["validation"] or not counts["window"]:
        facts.update(available=False, reason=(
            f"the prepared rows hold {train_days} days up to the year-earlier origin's training end "
            f"{windows.train_end} (at least {min_train_days} needed), {counts['validation']} rows to choose the "
            f"epoch on and {counts['window']} in the year-earlier horizon: too short a history to replay the "
            "forecast a year earlier"))
        return facts
    vocabularies = features.metadata["vocabularies"]
    rows = as_last_trained(rows, vocabularies, first, windows.train_end)
    files = write_splits(rows, out_uri, max(len(features.train_files), 1))
    facts.update(available=True, train_days=train_days)

    def view(train: list[str], validation: list[str], window_start: date) -> FeatureSet:
        metadata = {**features.metadata, "validation_window": {"start": window_start.isoformat(),
                                                               "name": "season-backtest"}}
        return replace(features, attempt_uri=f"{features.attempt_uri}#season-backtest", metadata=metadata,
                       train_files=train, validation_files=validation)

    training = view(files["train"], files["validation"], windows.train_end + timedelta(days=1))
    scoring = view(files["train"] + files["validation"], files["window"], windows.origin + timedelta(days=1))
    return BacktestViews(training, scoring, facts)
