"""Rolling-origin backtest through Airflow: land N consecutive realistic daily drops, run the DAG for each date in
order (as `airflow backfill` would), and print how every forecast scored as later drops brought its actuals.

    PYTHONPATH=.:scripts/stack .venvs/airflow/bin/python bench/bench_backtest.py [--from-date 2015-07-25] [--days 5]
        [--stores 10] [--epochs 5] [--baseline-tolerance 0]

Each date's run trains on data up to its date, forecasts with a model trained on data up to its date (its own if the
gate promotes it, else the champion as of that date), and its scoring task scores the earlier dates' forecasts
against the actual sales in its own drop. Runs in a fresh embedded stack (its own moto server and SQLite Airflow
home). Writes bench/out/backtest.json and prints one row per forecast (as-of date, model used and the as-of date it
was trained on, days scored, model vs naive baseline exp-RMSPE), the accuracy by lead day and each task's wall time.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import stack as embedded
from rossmann_jobs.past_forecasts.records import BASELINE_RMSPE, MODEL_RMSPE

REPO = Path(__file__).resolve().parents[1]

JOBS_PYTHON = REPO / ".venvs" / "jobs" / "bin" / "python"
AIRFLOW = REPO / ".venvs" / "airflow" / "bin" / "airflow"
AIRFLOW_PYTHON = REPO / ".venvs" / "airflow" / "bin" / "python"
# summary.json's keys, from the module that defines them (standard library only: this script runs in the Airflow env).
MODEL, BASELINE = MODEL_RMSPE, BASELINE_RMSPE


def run_summary(env: dict[str, str], day: str) -> dict:
    result = subprocess.run([str(AIRFLOW_PYTHON), str(REPO / "scripts" / "stack" / "run_summary.py"),
                             "--logical-date", day, "--json"], env=env, cwd=REPO, capture_output=True, text=True,
                            check=True)
    return json.loads(result.stdout)


def task_wall_times(dags_test_output: str) -> dict[str, float]:
    """Seconds from each task's `[DAG TEST] starting` to its `end task` line (the last try's, for retried tasks)."""
    started: dict[str, datetime] = {}
    walls: dict[str, float] = {}
    for match in re.finditer(r"^(\S+Z) .*?\[DAG TEST\] (starting|end task) task_id=(\w+)", dags_test_output,
                             re.MULTILINE):
        at = datetime.fromisoformat(match[1].replace("Z", "+00:00"))
        if match[2] == "starting":
            started[match[3]] = at
        elif match[3] in started:
            walls[match[3]] = round((at - started[match[3]]).total_seconds(), 1)
    return walls


def s3_json(env: dict[str, str], uri: str):
    import boto3

    bucket, _, key = uri.removeprefix("s3://").partition("/")
    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_DEFAULT_REGION"],
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    return json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-date", default="2015-07-25")
    parser.add_argument("--days", type=int, default=5)
    parser.add_argument("--stores", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--baseline-tolerance", type=float, default=0.0,
                        help="the DAG param: how much worse than the naive baseline a promoted model may be")
    parser.add_argument("--json", default=str(REPO / "bench" / "out" / "backtest.json"))
    args = parser.parse_args()

    days = [(date.fromisoformat(args.from_date) + timedelta(days=i)).isoformat() for i in range(args.days)]
    state = embedded.Stack(Path(tempfile.mkdtemp(prefix="rossmann-bench-backtest-")))
    endpoint = embedded.start_s3(state, port=embedded.free_port())
    state.write_state("api.port", str(embedded.free_port()))
    try:
        env = {**os.environ, **embedded.airflow_env(state, endpoint), **embedded.aws_env(state, endpoint)}
        embedded.airflow_init(state, env)
        bucket = env["ROSSMANN_BUCKET"]
        subprocess.run([str(JOBS_PYTHON), "-m", "rossmann_jobs.synth", "land", "--out", f"s3://{bucket}/raw",
                        "--from-date", days[0], "--to-date", days[-1], "--stores", str(args.stores),
                        "--seed", str(args.seed)], env=env, cwd=REPO, check=True, capture_output=True)
        conf = {"epochs": args.epochs, "batch_size": args.batch_size, "learning_rate": args.learning_rate,
                "num_proc": 2, "baseline_tolerance": args.baseline_tolerance}
        runs = {}
        for day in days:
            started = time.perf_counter()
            result = subprocess.run([str(AIRFLOW), "dags", "test", "rossmann_forecast", day, "-c", json.dumps(conf)],
                                    env=env, cwd=REPO, capture_output=True, text=True)
            summary = run_summary(env, day)
            if "success" not in summary["state"]:
                sys.exit(f"run {day} ended {summary['state']}: {summary['tasks']}\n{result.stdout[-4000:]}")
            xcom = summary["xcom"]
            runs[day] = {"wall_s": round(time.perf_counter() - started, 1),
                         "task_wall_s": task_wall_times(result.stdout), "gate": xcom["quality_gate"],
                         "forecast": xcom["publish_forecast"], "scores": xcom.get("publish_scores")}
            gate = xcom["quality_gate"]
            print(f"{day}: {'promoted' if gate['promoted'] else 'kept the champion'} "
                  f"({runs[day]['wall_s']:.0f} s)", flush=True)
        scores = s3_json(env, f"s3://{bucket}/forecast/scores/summary.json")
    finally:
        embedded.stop_process(state, "moto")

    record = {"benchmark": "backtest", "recorded_at": datetime.now(timezone.utc).isoformat(),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform()},
              "args": vars(args), "runs": runs, "scores": scores}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(record, indent=2, default=str))

    print("\n| forecast as-of | promoted its own model | model used (pinned) | days scored | rows | "
          "model exp-RMSPE | baseline exp-RMSPE |")
    print("|---|---|---|---:|---:|---:|---:|")
    for entry in scores["forecasts"].values():
        run = runs.get(entry["as_of"], {})
        gate = run.get("gate") or {}
        model, baseline = entry.get(MODEL), entry.get(BASELINE)
        used = "/".join(str(gate.get("champion_model_uri", "")).split("/")[-3:-1])
        print(f"| {entry['as_of']} | {gate.get('promoted')} | {used} | {entry.get('days_scored', 0)} | "
              f"{entry.get('rows', 0)} | {'' if model is None else f'{model:.4f}'} | "
              f"{'' if baseline is None else f'{baseline:.4f}'} |")
    leads: dict[int, list[tuple[int, float, float]]] = {}
    for entry in scores["forecasts"].values():
        for lead, rows, model, baseline in entry["by_lead_day"]:
            leads.setdefault(lead, []).append((rows, model, baseline))
    if leads:
        print("\n| lead day | rows | model exp-RMSPE | baseline exp-RMSPE |\n|---:|---:|---:|---:|")
        for lead, parts in sorted(leads.items()):
            rows = sum(p[0] for p in parts)
            model = (sum(p[0] * p[1] ** 2 for p in parts) / rows) ** 0.5
            baseline = (sum(p[0] * p[2] ** 2 for p in parts) / rows) ** 0.5
            print(f"| {lead} | {rows} | {model:.4f} | {baseline:.4f} |")
    tasks = sorted({task for run in runs.values() for task in run["task_wall_s"]})
    print("\n| task | " + " | ".join(runs) + " |\n|---|" + "---:|" * len(runs))
    for task in tasks:
        print(f"| {task} | " + " | ".join(str(run["task_wall_s"].get(task, "")) for run in runs.values()) + " |")
    overall = scores["overall"]
    print(f"\npooled over {overall['forecasts_scored']} scored forecasts, {overall['rows']} rows: model "
          f"{overall[MODEL]}, baseline {overall[BASELINE]}")
    print(f"\nJSON: {args.json}")


if __name__ == "__main__":
    main()
