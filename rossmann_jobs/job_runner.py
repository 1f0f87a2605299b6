"""The shell of every job's main(): one Spark session, step timers, and a known failure as one line and exit 2."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import time
from typing import Any, Callable, Iterator

from rossmann_jobs import spark_session
from rossmann_jobs.job_protocol import BAD_INPUT_EXIT_CODE, failure_line

log = logging.getLogger("rossmann")

_running_steps: list[str] = []   # the timed steps under way (several at once where driver threads run actions)
_steps_at_failure: list[str] = []   # those under way when the first step failed: named in the failure's message


@contextlib.contextmanager
def timed(step: str, timings: dict[str, float] | None = None) -> Iterator[None]:
    """Log the wall time of a step and optionally record it in a timings dict."""
    start = time.perf_counter()
    log.info("%s: started", step)
    _running_steps.append(step)
    try:
        yield
    except BaseException:
        if not _steps_at_failure:   # the innermost step sees the exception first, its outer steps still running
            _steps_at_failure.extend(_running_steps)
        raise
    finally:
        _running_steps.remove(step)
        seconds = time.perf_counter() - start
        if timings is not None:
            timings[step] = round(seconds, 3)
        log.info("%s: finished in %.1f s", step, seconds)


class SparkMemoryError(RuntimeError):
    """A Spark task could not get the memory it asked for: a retry with the same settings would most likely fail
    the same way, so the job ends at once with what to raise."""


# Spark's execution memory manager raises SparkOutOfMemoryError in the task (an aggregation's hash map or a sort
# that could not get a page even after spilling); the JVM heap's OutOfMemoryError can also reach the driver.
_OUT_OF_MEMORY = re.compile(r"(?:org\.apache\.spark\.memory\.SparkOutOfMemoryError|java\.lang\.OutOfMemoryError)"
                            r"(?:: *([^\n]*))?")
MEMORY_SETTINGS = ("spark.master", "spark.driver.memory", "spark.executor.memory", "spark.executor.cores",
                   "spark.memory.fraction")


def memory_error(job: str, error: BaseException, conf: dict[str, str],
                 steps: list[str] | None = None) -> SparkMemoryError | None:
    """The clear, actionable form of a Spark out-of-memory failure (None when error is not one): which step, what
    Spark said, the sizing it ran with and the setting to raise."""
    match = _OUT_OF_MEMORY.search(str(error))
    if match is None:
        return None
    sizing = ", ".join(f"{key}={conf[key]}" for key in MEMORY_SETTINGS if key in conf)
    during = ", ".join(steps if steps is not None else _steps_at_failure) or "the job"
    example = json.dumps({"job_conf": {job: {"spark.driver.memory": "4g", "spark.executor.memory": "4g"}}})
    return SparkMemoryError(
        f"Spark ran out of memory during '{during}' ({(match.group(1) or 'OutOfMemoryError').strip()}) with "
        f"{sizing or 'Spark defaults'}. A retry with the same settings would most likely fail again: give the "
        f"{job} job more memory per task - spark.driver.memory in local mode (its tasks run in the driver JVM), "
        "spark.executor.memory or fewer spark.executor.cores on a cluster - in the Spark connection's extra, e.g. "
        f"{example} (docs/deploy.md, 'Sizing').")


def spark_conf(spark) -> dict[str, str]:
    """The running context's settings; empty where the JVM no longer answers (a driver heap exhausted)."""
    try:
        return dict(spark.sparkContext.getConf().getAll())
    except Exception:   # noqa: BLE001 - only the error message's sizing is lost
        return {}


def run_job(name: str, run: Callable[[Any, argparse.Namespace], Any], args: argparse.Namespace,
            known_errors: tuple[type[BaseException], ...], progress_interval_s: float = 10.0) -> int:
    """The shell of every job's main(argv): one session for run(spark, args), which commits the job's output and
    returns its summary; the session is always stopped. A known error, or Spark running out of memory, becomes one
    "<name> failed: <reason>" line and exit status 2. Anything else propagates (exit 1: retryable)."""
    spark = spark_session.build_spark_session(f"rossmann-{name}")
    failure: BaseException | None = None
    _steps_at_failure.clear()   # a failure's steps are this run's, not those of an earlier job in the process
    try:
        with spark_session.stage_progress(spark, progress_interval_s), timed(name):
            run(spark, args)
    except known_errors as error:
        failure = error
    except Exception as error:
        failure = memory_error(name, error, spark_conf(spark))
        if failure is None:
            raise
    finally:
        spark.stop()
    if failure is None:
        return 0
    # Logged after spark.stop()'s own lines, so it is among the last lines of spark-submit's output: the operator
    # reads the failure reason from there.
    log.error(failure_line(name, failure))
    return BAD_INPUT_EXIT_CODE
