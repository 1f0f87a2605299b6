"""The one Airflow pool every spark-submit task of the DAG takes a slot of, and the set-up step that creates it.

`max_active_tis_per_dag` limits each task id on its own, so with two active runs one run's prepare could hold the
Spark cores that the other run's Horovod ranks wait for. One pool across all Spark tasks (default 1 slot: the jobs
size themselves to the whole Spark master) makes them queue instead. Raise the slots for a cluster that can run
several jobs at once: `ROSSMANN_SPARK_POOL_SLOTS=2 python -m rossmann.pools` (or `airflow pools set`).
"""
from __future__ import annotations

import os
from typing import Mapping

SPARK_POOL = "rossmann_spark"
SPARK_POOL_SLOTS_ENV = "ROSSMANN_SPARK_POOL_SLOTS"
DEFAULT_SPARK_POOL_SLOTS = 1
DESCRIPTION = "rossmann_forecast: spark-submit tasks of every run (prepare, train, predict, score)"


def spark_pool_slots(environ: Mapping[str, str] = os.environ) -> int:
    raw = environ.get(SPARK_POOL_SLOTS_ENV, str(DEFAULT_SPARK_POOL_SLOTS))
    if not raw.strip().isdigit() or int(raw) < 1:
        raise ValueError(f"{SPARK_POOL_SLOTS_ENV}={raw!r}: give a whole number of Spark jobs that may run at once "
                         "(>= 1)")
    return int(raw)


def ensure_spark_pool(environ: Mapping[str, str] = os.environ) -> str:
    """Create or resize the pool in the metadata database; says what it did."""
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session

    slots = spark_pool_slots(environ)
    with create_session() as session:
        existing = Pool.get_pool(SPARK_POOL, session=session)
        before = None if existing is None else (existing.slots, existing.description, existing.include_deferred)
        if before == (slots, DESCRIPTION, False):
            return f"pool {SPARK_POOL}: {slots} slot(s), unchanged"
        Pool.create_or_update_pool(SPARK_POOL, slots, DESCRIPTION, include_deferred=False, session=session)
    return f"pool {SPARK_POOL}: {slots} slot(s), {'created' if before is None else 'updated'}"


def main() -> None:
    """The pool alone (compose's init runs this; `rossmann-forecast bootstrap` does it with the rest)."""
    print(ensure_spark_pool())


if __name__ == "__main__":
    main()
