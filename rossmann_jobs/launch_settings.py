"""spark-submit settings fixed before a job's JVM starts, derived from the size of the drop. Standard library only.

A job cannot change its own JVM's flags once spark-submit has started it, so the Airflow operator
(plugins/rossmann/spark_submit.py) asks this module before it launches, from the drop's manifest (its row counts;
rossmann_jobs/features/drop_manifest.py). Connection and task settings of the same key win over these.

Why the JIT: every job is a cold JVM that generates and compiles a few hundred classes of Spark code for a few
seconds of work. HotSpot's optimizing compiler (C2) then takes one of two cores away from the tasks, and on a small
drop never pays off: C1 only (`-XX:TieredStopAtLevel=1`) halves a 30-store job's CPU time. On a large drop C2's
faster code wins, so the default stays there (bench/RESULTS.md, "Fixed cost per run").
"""
from __future__ import annotations

from typing import Any, Mapping

from rossmann_jobs.job_protocol import JOBS

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
C1_ONLY = "-XX:TieredStopAtLevel=1"
# train.csv rows below which a job's driver JVM runs C1 only. C1 cut every job's CPU at 30 and 150 stores (137,000
# rows) and cost prepare time at full scale (1.02 M rows); the crossover in between is not measured yet, so one
# conservative threshold for all jobs (bench/RESULTS.md, "Fixed cost per run").
C1_BELOW_TRAIN_ROWS = {"prepare": 200_000, "train": 200_000, "predict": 200_000, "score": 200_000}


def drop_rows(manifest: Mapping[str, Any] | None) -> int | None:
    """train.csv's data rows from a drop manifest (`<drop>/_SUCCESS`); None for an empty marker or another shape."""
    try:
        return int(manifest["files"]["train.csv"]["rows"])
    except (KeyError, TypeError, ValueError):
        return None


def launch_conf(job: str, train_rows: int | None) -> dict[str, str]:
    """The job's launch settings for a drop of train_rows rows (None: unknown size, Spark's defaults)."""
    if job not in JOBS:
        raise ValueError(f"{job!r} is not one of the jobs {list(JOBS)}")
    if train_rows is not None and train_rows < C1_BELOW_TRAIN_ROWS[job]:
        return {JAVA_OPTIONS: C1_ONLY}
    return {}
