"""Freshness of a drop for as-of D: train.csv holds the actuals of D, test.csv holds no day up to D.

The rule (docs: README "The daily contract"), checked before the feature pass on the rows that parse:
- train.csv's latest row dated <= D is at least D - tolerance (--max-staleness-days, default 0): else the extract
  is stale and a forecast "as of D" would really be made as of an earlier day;
- every store that reports holds a row in [D - tolerance, D]: a store with a row in the REPORTING_DAYS days before
  that and a plan row after D is missing from a partial extract (a store in a long closure, such as the 2014
  refurbishments, reported too long ago to count);
- test.csv has no row dated <= D: the plan of an earlier day (a stale plan) would be forecast for days already
  past, and its rows dated <= D could never be scored;
- a plan that starts after D+1 is not refused (the horizon is every test.csv row after D, also a later test
  period in a backtest), but logged when train.csv holds no row after D (days that nobody forecasts).
Pure checks over per-store facts (freshness_facts); the facts come from one small aggregation.
"""
from __future__ import annotations

import logging
from datetime import date, timedelta
from typing import Any, Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.features.drop_settings import DEFAULT_MAX_STALENESS_DAYS  # noqa: F401  (prepare's default)
from rossmann_jobs.features.split import SOURCE
from rossmann_jobs.features.validate import EXAMPLES_PER_PROBLEM, RawInputError, acceptable

log = logging.getLogger("rossmann.prepare")

REPORTING_DAYS = 7
LAST_TRAIN, TRAIN_AFTER, FIRST_PLAN, PLAN_NOT_AFTER = "last_train", "train_after", "first_plan", "plan_not_after"
FIRST_TRAIN = "first_train"


def freshness_facts(rows: DataFrame, as_of: date) -> DataFrame:
    """Per Store of the parseable sales rows (pipeline.sales_rows): the last train.csv date <= as_of, the number of
    train.csv rows after it, the first test.csv date after it, the number of test.csv rows on or before it, and the
    first train.csv date (first_train_date)."""
    day, after = F.col("Date"), F.col("Date") > F.lit(as_of)
    train, plan = F.col(SOURCE) == "train", F.col(SOURCE) == "test"
    return (rows.filter(acceptable()).groupBy("Store")
            .agg(F.max(F.when(train & ~after, day)).alias(LAST_TRAIN),
                 F.count(F.when(train & after, 1)).alias(TRAIN_AFTER),
                 F.min(F.when(plan & after, day)).alias(FIRST_PLAN),
                 F.count(F.when(plan & ~after, 1)).alias(PLAN_NOT_AFTER),
                 F.min(F.when(train & ~after, day)).alias(FIRST_TRAIN)))


def first_train_date(stores: Sequence[Mapping[str, Any]]) -> date | None:
    """The first train.csv date <= as_of over the stores' freshness_facts; None without one."""
    return min((s[FIRST_TRAIN] for s in stores if s[FIRST_TRAIN] is not None), default=None)


def stale_plan_examples(rows: DataFrame, as_of: date) -> list[str]:
    """Up to EXAMPLES_PER_PROBLEM test.csv rows dated on or before as_of, earliest first, as JSON."""
    stale = rows.filter(acceptable() & (F.col(SOURCE) == "test") & (F.col("Date") <= F.lit(as_of)))
    record = F.to_json(F.struct("Id", "Store", "Date"))
    return [row[0] for row in stale.orderBy("Date", "Store").select(record).limit(EXAMPLES_PER_PROBLEM).collect()]


def check_freshness(stores: Sequence[Mapping[str, Any]], as_of: date, max_staleness_days: int,
                    plan_examples) -> None:
    """Refuse a stale or partial train.csv or a stale plan (see the module's rule); plan_examples() lists example
    stale test.csv rows (a query, run only when they are needed)."""
    oldest = as_of - timedelta(days=max_staleness_days)
    tolerance = f"--max-staleness-days {max_staleness_days}"
    reported = [s for s in stores if s[LAST_TRAIN] is not None]
    if not reported:
        raise RawInputError(f"train.csv: no row is dated on or before --as-of {as_of}: the drop holds no actuals "
                            "up to the as-of date. Check the drop's date, or land the drop again.")
    latest = max(s[LAST_TRAIN] for s in reported)
    if latest < oldest:
        last_rows = sorted((s for s in reported if s[LAST_TRAIN] == latest), key=lambda s: s["Store"])
        raise RawInputError(
            f"train.csv: stale extract: its latest row in column 'Date' is dated {latest}, {(as_of - latest).days} "
            f"days before --as-of {as_of} ({tolerance} allows {max_staleness_days}), so the drop does not hold the "
            f"actuals of {as_of}; e.g. the last rows: {_store_days(last_rows, LAST_TRAIN)}. Land the drop of "
            f"{as_of} again from a fresh extract, or raise {tolerance.split()[0]} if the actuals arrive late.")
    missing = sorted((s for s in reported if s[FIRST_PLAN] is not None
                      and oldest - timedelta(days=REPORTING_DAYS) <= s[LAST_TRAIN] < oldest),
                     key=lambda s: s["Store"])
    if missing:
        raise RawInputError(
            f"train.csv: partial extract: {len(missing)} stores that reported in the {REPORTING_DAYS} days before "
            f"{oldest} and are in test.csv's plan have no row dated {oldest} .. {as_of} (column 'Date', {tolerance}); "
            f"e.g. {_store_days(missing, LAST_TRAIN)}. Land the drop of {as_of} again with every store's actuals.")
    next_day = as_of + timedelta(days=1)
    stale_plan = sum(s[PLAN_NOT_AFTER] for s in stores)
    if stale_plan:
        raise RawInputError(
            f"test.csv: stale plan: {stale_plan} rows are dated on or before --as-of {as_of} in column 'Date' (the "
            f"plan must start at {next_day}), e.g. {'; '.join(plan_examples())}. The drop holds an earlier day's "
            f"test.csv: land the plan of {as_of}.")
    planned = [s[FIRST_PLAN] for s in stores if s[FIRST_PLAN] is not None]
    if planned and min(planned) > next_day and not any(s[TRAIN_AFTER] for s in stores):
        # Not refused: the documented contract lets a plan start after D+1 (the horizon is every test.csv row
        # after D, e.g. a backtest of a history cut at D against a later test period); the gap is reported.
        log.warning("test.csv: the plan starts at %s, not at %s (the day after --as-of): the days between are not "
                    "forecast", min(planned), next_day)


def _store_days(stores: Sequence[Mapping[str, Any]], column: str) -> str:
    return "; ".join(f"Store {s['Store']}: last row {s[column]}" for s in stores[:EXAMPLES_PER_PROBLEM])

