"""Point-in-time windows (horizon, validation) and the outcome of every sales row: a split, an exclusion or quarantine.

For an as-of date D:
- train and validation use train.csv rows dated <= D only; the forecast horizon (test split) is the test.csv rows
  dated > D (all of them when D is before the test period);
- the validation window is out of time by default (RECENT): the last L days up to D, L = the horizon's length, so
  early stopping, the best epoch and the quality gate judge a model the way the horizon will, from an origin before
  the window (features/recent_level.py gives the last 48 days the origin D - 48; with the daily contract's 48-day
  horizon that is the window's start). YEAR_EARLIER is Horovod's example: the
  horizon shifted back 365 days, (horizon_start - 365, horizon_end - 365], cut at D (the last L days when that
  leaves no day). It lies inside the training period, where a model interpolates: a model biased on the recent
  weeks can win there (bench/RESULTS.md "Robustness matrix").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import date, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.features.validate import acceptable

ONE_YEAR = timedelta(days=365)
SOURCE = "_source"                      # "train" or "test": which file a sales row came from
IN_SCOPE = "_in_scope"                  # dated inside the part of its file that this as-of date uses
OUTCOME = "_outcome"

QUARANTINED, AFTER_AS_OF, NOT_AFTER_AS_OF = "quarantined", "after_as_of", "on_or_before_as_of"
ZERO_SALES, SAMPLED_OUT = "zero_sales", "sampled_out"
TRAIN, VALIDATION, TEST = "train", "validation", "test"
RECENT, YEAR_EARLIER = "recent", "year-earlier"
VALIDATION_RULES = (RECENT, YEAR_EARLIER)
DEFAULT_VALIDATION_RULE = RECENT
SAMPLE_BUCKETS = 1_000_000


@dataclass(frozen=True)
class Windows:
    """Inclusive date ranges of the horizon (test split) and the validation split for one as-of date."""

    as_of: date
    test_start: date
    test_end: date
    validation_start: date
    validation_end: date
    validation_rule: str

    def as_json(self) -> dict:
        return {key: value.isoformat() if isinstance(value, date) else value for key, value in asdict(self).items()}

    def last_train_date(self) -> date:
        """The latest date a train-split row can have: the day before a validation window that reaches as_of (the
        default, RECENT), else as_of."""
        return self.validation_start - timedelta(days=1) if self.validation_end >= self.as_of else self.as_of


def check_validation_rule(validation_rule: str) -> None:
    if validation_rule not in VALIDATION_RULES:
        raise ValueError(f"validation window {validation_rule!r}: expected one of {', '.join(VALIDATION_RULES)}")


def plan_windows(as_of: date, horizon_start: date, horizon_end: date,
                 validation_rule: str = DEFAULT_VALIDATION_RULE) -> Windows:
    """The validation window for a horizon [horizon_start, horizon_end] of test rows after as_of."""
    check_validation_rule(validation_rule)
    length = (horizon_end - horizon_start).days + 1
    recent = (as_of - timedelta(days=length - 1), as_of)
    if validation_rule == RECENT:
        return Windows(as_of, horizon_start, horizon_end, *recent,
                       f"last {length} days up to as_of (out of time, like the horizon)")
    start, end = horizon_start - ONE_YEAR + timedelta(days=1), min(horizon_end - ONE_YEAR, as_of)
    rule = "horizon shifted back 365 days, cut at as_of"
    if start > end:
        start, end = recent
        rule = f"last {length} days up to as_of (the shifted horizon lies after as_of)"
    return Windows(as_of, horizon_start, horizon_end, start, end, rule)


def in_scope(as_of: date) -> Column:
    """Train rows up to as_of and test rows after it are the ones this as-of date uses."""
    is_train = F.col(SOURCE) == TRAIN
    return F.when(is_train, F.col("Date") <= F.lit(as_of)).otherwise(F.col("Date") > F.lit(as_of))


def sampled(sample_rate: float | None, seed: int) -> Column:
    """Deterministic per-row sample keyed on (Store, Date, seed): the same rows on every run and partitioning."""
    if sample_rate is None or sample_rate >= 1:
        return F.lit(True)
    bucket = F.pmod(F.xxhash64("Store", "Date", F.lit(seed)), F.lit(SAMPLE_BUCKETS))
    return bucket < F.lit(int(round(sample_rate * SAMPLE_BUCKETS)))


def assign_outcome(df: DataFrame, windows: Windows, sample_rate: float | None, seed: int) -> DataFrame:
    """OUTCOME of every row (needs SOURCE, IN_SCOPE, PROBLEM, Date, Sales, Store)."""
    is_train = F.col(SOURCE) == TRAIN
    in_validation = F.col("Date").between(F.lit(windows.validation_start), F.lit(windows.validation_end))
    outcome = (F.when(~acceptable(), QUARANTINED)
               .when(~F.col(IN_SCOPE), F.when(is_train, AFTER_AS_OF).otherwise(NOT_AFTER_AS_OF))
               .when(~is_train, TEST)
               .when(F.col("Sales") == 0, ZERO_SALES)
               .when(~sampled(sample_rate, seed), SAMPLED_OUT)
               .when(in_validation, VALIDATION)
               .otherwise(TRAIN))
    return df.withColumn(OUTCOME, outcome)
