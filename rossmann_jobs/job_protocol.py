"""How a job and its Airflow task talk: the job names and how a job reports bad input. Standard library only.

A known input or feature error, or Spark running out of memory, cannot be fixed by running the same task again, so
the job (spark_session.run_job) logs one `<job> failed: <reason>` line as its last and exits with
BAD_INPUT_EXIT_CODE; the operator (plugins/rossmann/spark_submit.py) then fails the task without retries, with that
line as the reason. Any other exit status keeps Airflow's retry policy.
"""
from __future__ import annotations

import re

JOBS = ("prepare", "train", "predict", "score")   # rossmann_jobs/<job>.py
BAD_INPUT_EXIT_CODE = 2
FAILURE_LINE = re.compile(rf"\b(?:{'|'.join(JOBS)}) failed: .*")
# The jobs' error messages quote example rows (data) after this marker; an alert sends only the text before it.
EXAMPLES_MARKER = "e.g."


def failure_line(job: str, reason: BaseException | str) -> str:
    """The one line that carries the reason (on one line, so that a log tail always holds all of it)."""
    if job not in JOBS:
        raise ValueError(f"{job!r} is not one of the jobs {list(JOBS)}")
    return f"{job} failed: {' '.join(str(reason).splitlines())}"
