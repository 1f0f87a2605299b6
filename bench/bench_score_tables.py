"""The score job's tables of a day: one aggregation for every grouping vs one query per grouping, on one session.

    PYTHONPATH=. .venvs/jobs/bin/python bench/bench_score_tables.py [--forecasts 7] [--stores 30] [--rounds 3]

Builds the scored rows of --forecasts daily forecasts (as of consecutive days, 48-day horizons, P10/P50/P90 and a
baseline) of --stores stores against the actuals up to the scoring date, as a backfill's last day scores them
(scoring.scored_rows, cached as score.py caches it, on a session with the jobs' settings), then times, alternated,
(a) one query per grouping (overall, lead day, lead week, store; score.py before session 20) and (b)
scoring.grouped_scores, each collected, with the Spark jobs and stages each ran. Writes bench/out/score_tables.json
and prints a table. Local[2].
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from datetime import date, timedelta
from pathlib import Path

from rossmann_jobs import score
from rossmann_jobs.forecast_scores import scoring
from rossmann_jobs.spark_session import build_spark_session

OUT = Path(__file__).resolve().parent / "out" / "score_tables.json"


def scored_rows(spark, forecasts: int, stores: int, scoring_date: date):
    rng = random.Random(7)
    rows, actuals = [], []
    for index in range(forecasts):
        as_of = scoring_date - timedelta(days=forecasts - index)
        for store in range(1, stores + 1):
            for lead in range(1, 49):
                mid = 5000.0 * rng.uniform(0.8, 1.2)
                rows.append((f"{as_of}/run", as_of, store, as_of + timedelta(days=lead), mid, mid * 1.02,
                             mid * 0.9, mid, mid * 1.1, mid * 0.8, mid, mid * 1.2))
    for store in range(1, stores + 1):
        for back in range(forecasts + 1):
            actuals.append((store, scoring_date - timedelta(days=back), 5000.0 * rng.uniform(0.8, 1.2)))
    forecast_frame = spark.createDataFrame(rows, ", ".join(
        f"{name} {kind}" for name, kind in zip(scoring.FORECAST_COLUMNS,
                                                ["string", "date", "int", "date"] + ["double"] * 8)))
    actual_frame = spark.createDataFrame(actuals, "StoreId int, Date date, SalesActual double")
    scored = scoring.scored_rows(forecast_frame, actual_frame, scoring_date).cache()
    return scored, scored.count()


def per_grouping(scored) -> int:
    return sum(len(scored.groupBy(scoring.KEY_COL, *by).agg(*scoring.scores()).orderBy(scoring.KEY_COL, *by)
                   .collect()) for by in score.GROUPINGS.values())


def one_aggregation(scored) -> int:
    return len(scoring.grouped_scores(scored, score.GROUPINGS).collect())


def timed(spark, variant) -> dict:
    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup())
    started = time.perf_counter()
    rows = variant()
    seconds = time.perf_counter() - started
    jobs = set(tracker.getJobIdsForGroup()) - jobs_before
    stages = sum(len(tracker.getJobInfo(job).stageIds) for job in jobs if tracker.getJobInfo(job))
    return {"seconds": round(seconds, 3), "rows": rows, "spark_jobs": len(jobs), "stages": stages}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forecasts", type=int, default=7)
    parser.add_argument("--stores", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spark = build_spark_session("bench-score-tables", {"spark.ui.enabled": "false"})   # the jobs' settings
    scored, count = scored_rows(spark, args.forecasts, args.stores, date(2015, 7, 31))
    variants = {"query per grouping": lambda: per_grouping(scored), "one aggregation": lambda: one_aggregation(scored)}
    runs = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, variant in variants.items():
            runs[name].append(timed(spark, variant))
    result = {"forecasts": args.forecasts, "stores": args.stores, "scored_rows": count, "runs": runs,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
              "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1))
    print(f"{count} scored rows ({args.forecasts} forecasts x {args.stores} stores); {args.rounds} rounds alternated")
    print("| variant | median s | each round s | Spark jobs | stages | result rows |")
    print("|---|---:|---|---:|---:|---:|")
    for name, records in runs.items():
        each = ", ".join(f"{record['seconds']:.2f}" for record in records)
        median = statistics.median(record["seconds"] for record in records)
        print(f"| {name} | {median:.2f} | {each} | {records[-1]['spark_jobs']} | {records[-1]['stages']} | "
              f"{records[-1]['rows']} |")
    print(f"JSON: {OUT}")


if __name__ == "__main__":
    main()
