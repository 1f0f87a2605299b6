"""Re-runs every task of one DAG run in place, in one Airflow process: `airflow tasks clear` the run, then `airflow
tasks test` each task in DAG order (what an operator does with the CLI), paying Airflow's start-up once, not per task.

    python tests/dag/rerun_in_place.py DAG_ID RUN_ID DATE '["task", ...]' '{"task": {"param": value}}'
"""
from __future__ import annotations

import json
import sys

from airflow.cli.cli_parser import get_parser


def main(argv: list[str]) -> None:
    dag_id, run_id, day, tasks, task_params = argv[0], argv[1], argv[2], json.loads(argv[3]), json.loads(argv[4])
    parser = get_parser()

    def cli(*words: str) -> None:
        args = parser.parse_args(list(words))
        args.func(args)

    cli("tasks", "clear", dag_id, "-s", day, "-e", day, "-y")
    for task in tasks:
        params = ["-t", json.dumps(task_params[task])] if task in task_params else []
        print(f"== re-run of {task}", file=sys.stderr, flush=True)
        cli("tasks", "test", *params, dag_id, task, run_id)


if __name__ == "__main__":
    main(sys.argv[1:])
