"""A backfill as users run one: `airflow backfill create` over N landed dates on the embedded stack, timed end to end.

    PYTHONPATH=.:scripts/stack .venvs/airflow/bin/python bench/bench_backfill.py [--from-date 2015-07-22] [--days 4]
        [--stores 30] [--pool-slots 1] [--max-active-runs 2] [--label NAME] [--conf '{"epochs": 10, ...}']

Starts a fresh embedded stack in a temporary state dir (moto S3, Airflow on SQLite with the scheduler, api-server,
dag-processor and triggerer), lands one realistic drop per date, creates the backfill, and polls the REST API until
every run has finished. Records the backfill's wall time (create to the last run's end), each run's wall time and
state, each Spark task's duration and every task's state (a run's scoring is skipped while no earlier forecast
has been published), and the machine's load. The Spark pool's slots (ROSSMANN_SPARK_POOL_SLOTS) and the
backfill's --max-active-runs are the knobs compared. Merges results per label into bench/out/backfill.json and
prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import stack as embedded
from airflow_rest import AirflowRest, run_path

REPO = Path(__file__).resolve().parents[1]

AIRFLOW_PYTHON = REPO / ".venvs" / "airflow" / "bin" / "python"
JOBS_PYTHON = REPO / ".venvs" / "jobs" / "bin" / "python"
STACK = [str(AIRFLOW_PYTHON), str(REPO / "scripts" / "stack" / "stack.py")]
DAG_ID = "rossmann_forecast"
SPARK_TASKS = ("prepare_features", "train_model", "predict", "score_forecasts")
# The README demo's training settings (scripts/demo.sh) for 30 stores.
DEMO_CONF = {"sample_rate": 1.0, "epochs": 10, "batch_size": 128, "learning_rate": 0.001}


def log(message: str) -> None:
    print(f"{datetime.now():%H:%M:%S} {message}", flush=True)


def stack_env(state_dir: Path, pool_slots: int) -> dict[str, str]:
    """What `eval "$(stack.py env --with-aws)"` exports, for the Airflow CLI and the lander."""
    state = embedded.Stack(state_dir)
    bucket = os.environ.get("ROSSMANN_BUCKET", embedded.DEFAULT_BUCKET)
    return {**os.environ, "ROSSMANN_STATE_DIR": str(state_dir), "ROSSMANN_SPARK_POOL_SLOTS": str(pool_slots),
            **embedded.stack_airflow_env(state, bucket), **embedded.aws_env(state, embedded.require_s3(state))}


def seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 1)


def run_backfill(args: argparse.Namespace, state_dir: Path) -> dict:
    env = {**os.environ, "ROSSMANN_STATE_DIR": str(state_dir), "ROSSMANN_SPARK_POOL_SLOTS": str(args.pool_slots)}
    subprocess.run([*STACK, "s3-start"], env=env, check=True, capture_output=True)
    env = stack_env(state_dir, args.pool_slots)
    dates = [args.from_date + timedelta(days=offset) for offset in range(args.days)]
    log(f"landing {len(dates)} drops of {args.stores} stores: {dates[0]} .. {dates[-1]}")
    subprocess.run([str(JOBS_PYTHON), "-m", "rossmann_jobs.synth", "land", "--out", f"s3://{env['ROSSMANN_BUCKET']}/raw",
                    "--from-date", str(dates[0]), "--to-date", str(dates[-1]), "--stores", str(args.stores),
                    "--seed", str(args.seed)], env=env, check=True, capture_output=True, cwd=REPO)
    started_ui = subprocess.run([*STACK, "ui-start"], env=env, check=True, capture_output=True, text=True)
    url = next(word for word in started_ui.stdout.split() if word.startswith("http://"))
    secrets = json.loads((state_dir / "secrets.json").read_text())
    api = AirflowRest(url, "admin", secrets["admin_password"])
    api.wait_for(lambda: api.call("GET", f"/api/v2/dags/{DAG_ID}")[0] == 200, 300, "the DAG to be registered")
    assert api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] == 200
    log(f"backfill create: pool slots {args.pool_slots}, max active runs {args.max_active_runs}, conf {args.conf}")
    created = time.time()
    for attempt in range(3):
        created_backfill = subprocess.run(
            ["airflow", "backfill", "create", "--dag-id", DAG_ID, "--from-date", str(dates[0]), "--to-date",
             str(dates[-1]), "--max-active-runs", str(args.max_active_runs), "--dag-run-conf", json.dumps(args.conf)],
            env=env, capture_output=True, text=True, timeout=300)
        # SQLite lets one writer in: the scheduler, busy with the DAG just unpaused, can lock out the whole create
        # (one transaction, rolled back): try again.
        if created_backfill.returncode == 0 or "database is locked" not in created_backfill.stderr:
            break
        log(f"backfill create: SQLite was locked (attempt {attempt + 1}); trying again in 5 s")
        time.sleep(5)
    if created_backfill.returncode != 0:
        sys.exit(f"airflow backfill create failed (exit {created_backfill.returncode}):\n"
                 f"{created_backfill.stdout[-3000:]}\n{created_backfill.stderr[-5000:]}")
    wanted = {str(day) for day in dates}
    last_report = [0.0]

    def finished():
        runs = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")[1]["dag_runs"]
        done = {run["logical_date"][:10]: run for run in runs if run["state"] in ("success", "failed")}
        if time.time() - last_report[0] > 60:
            last_report[0] = time.time()
            log(f"{len(done)}/{len(wanted)} runs finished, {time.time() - created:.0f} s")
        return done if wanted <= set(done) else None

    runs = api.wait_for(finished, args.timeout_s, "every backfill run to finish", interval_s=10)
    wall = max(datetime.fromisoformat(run["end_date"]).timestamp() for run in runs.values()) - created
    per_run = {}
    for day in sorted(wanted):
        path = run_path(DAG_ID, runs[day])
        instances = {ti["task_id"]: ti for ti in api.call("GET", f"{path}/taskInstances")[1]["task_instances"]}
        per_run[day] = {"state": runs[day]["state"],
                        "wall_s": seconds_between(runs[day]["start_date"], runs[day]["end_date"]),
                        "tasks_s": {task: seconds_between(instances[task].get("start_date"),
                                                          instances[task].get("end_date"))
                                    for task in SPARK_TASKS if task in instances},
                        "task_states": {task: ti["state"] for task, ti in instances.items()}}
    return {"wall_s": round(wall, 1), "runs": per_run}


def print_table(results: dict) -> None:
    print("| label | days | stores | pool slots | max active runs | backfill wall s | s per date | runs ok | "
          "prepare s | train s | predict s | runs that scored | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for label, result in results.items():
        runs = result["runs"].values()

        def mean(task):
            values = [run["tasks_s"].get(task) for run in runs if run["tasks_s"].get(task)]
            return f"{sum(values) / len(values):.0f}" if values else ""
        ok = sum(run["state"] == "success" for run in runs)
        print(f"| {label} | {result['days']} | {result['stores']} | {result['pool_slots']} | "
              f"{result['max_active_runs']} | {result['wall_s']:.0f} | {result['wall_s'] / result['days']:.0f} | "
              f"{ok}/{result['days']} | {mean('prepare_features')} | {mean('train_model')} | {mean('predict')} | "
              f"{sum(run['task_states'].get('score_forecasts') == 'success' for run in runs)} | "
              f"{' '.join(f'{v:.1f}' for v in result['load_average'])} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-date", type=date.fromisoformat, default=date(2015, 7, 22))
    parser.add_argument("--days", type=int, default=4)
    parser.add_argument("--stores", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pool-slots", type=int, default=1)
    parser.add_argument("--max-active-runs", type=int, default=2)
    parser.add_argument("--conf", type=json.loads, default=DEMO_CONF)
    parser.add_argument("--label", default=None)
    parser.add_argument("--timeout-s", type=int, default=7200)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "backfill.json")
    args = parser.parse_args()
    label = args.label or f"pool{args.pool_slots}-runs{args.max_active_runs}"
    state_dir = Path(tempfile.mkdtemp(prefix="rossmann-backfill-"))
    env = {**os.environ, "ROSSMANN_STATE_DIR": str(state_dir)}
    try:
        result = run_backfill(args, state_dir)
    finally:
        subprocess.run([*STACK, "ui-stop"], env=env, capture_output=True)
        subprocess.run([*STACK, "s3-stop"], env=env, capture_output=True)
    result.update(days=args.days, stores=args.stores, pool_slots=args.pool_slots,
                  max_active_runs=args.max_active_runs, conf=args.conf, from_date=str(args.from_date),
                  load_average=list(os.getloadavg()), machine={"cpus": os.cpu_count(), "platform": platform.platform()},
                  recorded_at=datetime.now(timezone.utc).isoformat(), state_dir=str(state_dir))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    stored = json.loads(args.out.read_text()) if args.out.exists() else {}
    stored[label] = result
    args.out.write_text(json.dumps(stored, indent=2))
    print_table(stored)
    print(f"JSON: {args.out}; logs under {state_dir}")


if __name__ == "__main__":
    main()
