"""End-to-end wall time of the one-command demo (scripts/demo.sh): total, per DAG task and the longest silence.

    .venvs/airflow/bin/python bench/bench_demo.py [--stores N] [--epochs E] [--full]

Runs the demo in a fresh state dir (its own moto server and SQLite Airflow home), so nothing is cached between
runs except the two installed environments. Writes bench/out/demo.json. The longest silence is the longest wait
between two lines of the demo's output: what a newcomer sees as a possible hang (scripts/progress.sh keeps it
under 30 s); bench/out/demo_output.txt keeps the output with each line's second. The bench needs only the standard
library: run in a fresh clone (no .venvs), it measures the newcomer's first run, set-up included:

    git clone <repo> /tmp/fresh && python3.11 /tmp/fresh/bench/bench_demo.py
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATE = "2015-07-31"


def machine() -> dict:
    meminfo = Path("/proc/meminfo").read_text().split("\n")[0].split()
    return {"cpus": os.cpu_count(), "memory_gib": round(int(meminfo[1]) / 1024 ** 2, 1),
            "python": platform.python_version(), "platform": platform.platform(),
            "load_avg_1m_at_start": os.getloadavg()[0]}


def run_watched(command: list[str], env: dict[str, str]) -> tuple[int, str, float, str]:
    """Exit status, output (stdout and stderr merged, as a terminal shows them, each line with its second), the
    longest wait for a line and the line that ended it."""
    process = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    lines, started, last, longest, ended_by = [], time.monotonic(), time.monotonic(), 0.0, ""
    for line in process.stdout:
        now = time.monotonic()
        if now - last > longest:
            longest, ended_by = now - last, line.rstrip("\n")
        last = now
        lines.append(f"{now - started:7.1f} {line}")
    process.wait()
    if time.monotonic() - last > longest:
        longest, ended_by = time.monotonic() - last, "(the end of the output)"
    return process.returncode, "".join(lines), longest, ended_by


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", type=int, default=None, help="default: the demo's default")
    parser.add_argument("--epochs", type=int, default=None, help="default: the demo's default")
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args()

    demo_args = ["--date", DATE] + (["--full"] if args.full else [])
    demo_args += ["--stores", str(args.stores)] if args.stores else []
    demo_args += ["--epochs", str(args.epochs)] if args.epochs else []
    state_dir = Path(tempfile.mkdtemp(prefix="rossmann-bench-demo-"))
    env = {**os.environ, "ROSSMANN_STATE_DIR": str(state_dir)}
    info = machine()
    started = time.perf_counter()
    returncode, output, longest_silence_s, silence_ended_by = run_watched(
        ["bash", str(REPO / "scripts" / "demo.sh"), *demo_args], env)
    wall_s = time.perf_counter() - started
    out = REPO / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo_output.txt").write_text(output)   # each line with the second it came, to find a silence
    if returncode != 0:
        sys.exit(f"demo failed (exit {returncode}):\n{output[-8000:]}")

    summary = json.loads((state_dir / "log" / f"demo-{DATE}.summary.json").read_text())
    shutil.rmtree(state_dir, ignore_errors=True)
    metrics = summary["xcom"]["read_train_metrics"]
    record = {
        "benchmark": "demo_end_to_end",
        "recorded_at": datetime.now(timezone.utc).isoformat(),
        "machine": {**info, "load_avg_1m_at_end": os.getloadavg()[0]},
        "demo_args": demo_args,
        "wall_s": round(wall_s, 1),
        "longest_silence_s": round(longest_silence_s, 1),
        "longest_silence_ended_by": silence_ended_by,
        "set_up_included": "== installing the two environments" in output,
        "tasks_s": {task: round(values["duration_s"] or 0, 1) for task, values in summary["tasks"].items()},
        "val_exp_rmspe": metrics["best_val_exp_rmspe"],
        "epochs_run": metrics["epochs_run"],
        "samples_per_s": metrics["samples_per_s"],
        "promoted": summary["xcom"]["quality_gate"]["promoted"],
    }
    (out / "demo.json").write_text(json.dumps(record, indent=2))

    print("| step | seconds |\n|---|---:|")
    for task, seconds in record["tasks_s"].items():
        print(f"| task {task} | {seconds:.1f} |")
    print(f"| **demo total (scripts/demo.sh {' '.join(demo_args)})** | **{record['wall_s']:.1f}** |")
    print(f"| longest silence of the demo's output (ended by: {silence_ended_by.strip()}) | "
          f"{record['longest_silence_s']:.1f} |")
    print(f"\nval exp_rmspe {record['val_exp_rmspe']:.4f}, {record['epochs_run']} epochs, "
          f"{record['samples_per_s']} samples/s; load average {info['load_avg_1m_at_start']:.1f} -> "
          f"{record['machine']['load_avg_1m_at_end']:.1f} on {info['cpus']} CPUs; JSON: {out / 'demo.json'}")


if __name__ == "__main__":
    main()
