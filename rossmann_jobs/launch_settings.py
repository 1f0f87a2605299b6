"""spark-submit settings fixed before a job's JVM starts, derived from the size of the drop. Standard library only.

A job cannot change its own JVM's flags once spark-submit has started it, so the Airflow operator
(plugins/rossmann/spark_submit.py) asks this module before it launches, from the drop's manifest (its row counts;
rossmann_jobs/features/drop_manifest.py). Connection and task settings of the same key win over these.

Why the JIT: every job is a cold JVM that generates and compiles a few hundred classes of Spark code for a few
seconds of work. HotSpot's optimizing compiler (C2) then takes one of two cores away from the tasks, and on a small
drop never pays off: C1 only (`-XX:TieredStopAtLevel=1`) halves a 30-store job's CPU time. On a large drop C2's
faster code wins, so the default stays there (bench/RESULTS.md, "Fixed cost per run"). On a cluster the same holds
for the executors' JVMs (bench/RESULTS.md, "C1 for a small drop's executors too").

Why the class archive: before its first query, a cold Spark JVM loads and verifies some 15,000 classes. Mapped
from a class-data-sharing archive (rossmann_jobs/jvm_class_archive.py builds it; scripts/setup_env.sh puts it in the
jobs environment), they are ready at once, for a job of any size. The archive is named by $ROSSMANN_SPARK_CLASS_ARCHIVE
on the machine that launches the driver; absent, the JVM starts as before.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from rossmann_jobs.job_protocol import JOBS

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"   # a cluster's executors (in local mode: the driver's JVM)
# With C1 only, HotSpot reserves 48 MB for compiled code, not the 240 MB of tiered compilation. Spark generates new
# classes for every query: a session running small prepares one after another (as the tests' session does) filled
# it in about 70 s; HotSpot then stops compiling ("CodeCache is full. Compiler has been disabled") and runs every
# later query in the interpreter. A single 30-store prepare job stays below it. The reservation is address space,
# not memory in use.
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
CLASS_ARCHIVE_ENV = "ROSSMANN_SPARK_CLASS_ARCHIVE"
CLASS_ARCHIVE_NAME = "spark-classes.jsa"   # where scripts/setup_env.sh builds it: in the jobs environment's folder
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


def jobs_env_class_archive(jobs_env: str | Path) -> Path:
    """Where scripts/setup_env.sh builds the class archive for the jobs environment at jobs_env."""
    return Path(jobs_env) / CLASS_ARCHIVE_NAME


def class_archive(environ: Mapping[str, str] = os.environ) -> str | None:
    """The class archive named by $ROSSMANN_SPARK_CLASS_ARCHIVE, if that file exists."""
    path = environ.get(CLASS_ARCHIVE_ENV)
    return path if path and os.path.isfile(path) else None


def launch_conf(job: str, train_rows: int | None, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The job's launch settings for a drop of train_rows rows (None: unknown size, Spark's defaults)."""
    if job not in JOBS:
        raise ValueError(f"{job!r} is not one of the jobs {list(JOBS)}")
    options, executor = [], {}
    if train_rows is not None and train_rows < C1_BELOW_TRAIN_ROWS[job]:
        options.append(C1_ONLY)
        # A cluster's executors are cold JVMs with as little work as the driver's (local mode ignores it). Not the
        # class archive: its path is on the driver's machine.
        executor = {EXECUTOR_JAVA_OPTIONS: C1_ONLY}
    archive = class_archive(environ)
    if archive:
        options.append(f"-XX:SharedArchiveFile={archive}")
    return {**({JAVA_OPTIONS: " ".join(options)} if options else {}), **executor}
