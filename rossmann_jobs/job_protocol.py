"""How a job and its Airflow task talk: job names, the bad-input exit, one log format. Standard library only.

A known input or feature error, or Spark running out of memory, cannot be fixed by running the same task again, so
the job (job_runner.run_job) logs one `<job> failed: <reason>` line as its last and exits with
BAD_INPUT_EXIT_CODE; the operator (plugins/rossmann/spark_submit.py) then fails the task without retries, with that
line as the reason. Any other exit status keeps Airflow's retry policy.
"""
from __future__ import annotations

import logging
import os
import re
import sys

JOBS = ("prepare", "train", "predict", "score")   # rossmann_jobs/<job>.py
BAD_INPUT_EXIT_CODE = 2
FAILURE_LINE = re.compile(rf"\b(?:{'|'.join(JOBS)}) failed: .*")
# The jobs' error messages quote example rows (data) after this marker; an alert sends only the text before it.
EXAMPLES_MARKER = "e.g."
LOG_LEVEL_ENV = "ROSSMANN_LOG_LEVEL"


def failure_line(job: str, reason: BaseException | str) -> str:
    """The one line that carries the reason (on one line, so that a log tail always holds all of it)."""
    if job not in JOBS:
        raise ValueError(f"{job!r} is not one of the jobs {list(JOBS)}")
    return f"{job} failed: {' '.join(str(reason).splitlines())}"


def configure_logging(label: str = "%(name)s") -> None:
    """The one log format of every job process (driver, Python workers, Horovod ranks): the task log reads alike
    whichever process wrote a line; `label` names the writer (default: the logger's name)."""
    logging.basicConfig(
        level=os.environ.get(LOG_LEVEL_ENV, "INFO"),
        format=f"%(asctime)s %(levelname)s [{label}] %(message)s",
        stream=sys.stderr,
        force=True,
    )
    # py4j logs every callback-server reconnect with a traceback at INFO; only its warnings matter to us.
    logging.getLogger("py4j").setLevel(logging.WARNING)
