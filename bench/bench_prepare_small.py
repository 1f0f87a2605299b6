"""A small drop's prepare, repeated in one long-lived in-process session as the job-side tests run it.

Runs `run_prepare` --runs times on the tests' tiny drop (tests/jobs/fixtures/tiny_drop.py: 3 stores, 1,188 train
rows) in one local[2] SparkSession started with the JVM options that the checkout's launch_settings derive for a
small drop (C1 JIT, the class archive), as tests/jobs/conftest.py starts it. Records per run the wall time and the
job's own step timings (metadata.json's timings_s), and whether HotSpot reported a full code cache. Merges the
result per label into bench/out/prepare_small.json and prints a table of every label in it.

    PATH=.venvs/jobs/bin:$PATH .venvs/jobs/bin/python bench/bench_prepare_small.py --label after [--repo PATH]

Before/after on one machine: `git worktree add /tmp/before <commit>`, run with `--repo /tmp/before --label before`,
then without --repo as `--label after`, back to back. The first run of each session warms the JVM; the table's
median is over the later runs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CODE_CACHE_FULL = "CodeCache is full"


def child(repo: Path, runs: int) -> None:
    """In the child process: one session, runs prepares; prints one JSON line per run."""
    import logging
    import time
    from datetime import date

    sys.path[:0] = [str(repo), str(repo / "tests" / "jobs")]
    from fixtures.tiny_drop import tiny_drop, write_drop
    from rossmann_jobs.launch_settings import CLASS_ARCHIVE_ENV, JAVA_OPTIONS, jobs_env_class_archive, launch_conf

    os.environ.setdefault(CLASS_ARCHIVE_ENV, str(jobs_env_class_archive(sys.prefix)))
    java_options = launch_conf("prepare", 0)[JAVA_OPTIONS]
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-java-options {shlex.quote(java_options)} pyspark-shell"
    from rossmann_jobs.prepare import run_prepare
    from rossmann_jobs.spark_session import build_spark_session

    logging.disable(logging.INFO)
    spark = build_spark_session("bench-prepare-small", {"spark.master": "local[2]", "spark.sql.shuffle.partitions": "4",
                                                        "spark.ui.enabled": "false"})
    print(json.dumps({"java_options": java_options}), flush=True)
    for run in range(runs):
        work = tempfile.mkdtemp(prefix="bench-prepare-small-")
        raw = write_drop(f"{work}/raw", tiny_drop())
        started = time.perf_counter()
        metadata = run_prepare(spark, raw, f"{work}/out", date(2015, 7, 31), num_shards=2)
        print(json.dumps({"run": run, "wall_s": round(time.perf_counter() - started, 2),
                          "steps_s": metadata.get("timings_s", {})}), flush=True)
    spark.stop()


def measure(repo: Path, runs: int) -> dict:
    """Runs child() in a fresh interpreter (its own JVM); parses its JSON lines and HotSpot's code cache warning."""
    done = subprocess.run([sys.executable, __file__, "--child", "--repo", str(repo), "--runs", str(runs)],
                          capture_output=True, text=True, timeout=3600, env={**os.environ, "PYTHONPATH": str(repo)})
    if done.returncode != 0:
        raise SystemExit(f"bench child failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    per_run = [line for line in lines if "run" in line]
    later = [run["wall_s"] for run in per_run[1:]] or [per_run[0]["wall_s"]]
    steps = sorted({step for run in per_run for step in run["steps_s"]})
    return {"java_options": lines[0]["java_options"], "runs": per_run, "median_after_first_s": statistics.median(later),
            "first_s": per_run[0]["wall_s"],
            "median_steps_after_first_s": {step: statistics.median(run["steps_s"].get(step, 0.0) for run in per_run[1:])
                                           for step in steps} if len(per_run) > 1 else {},
            "code_cache_full": CODE_CACHE_FULL in done.stdout + done.stderr}


def git_commit(repo: Path) -> str:
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return done.stdout.strip() + (" + uncommitted changes" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="after")
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout whose jobs run (default: this one)")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "prepare_small.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.repo.resolve(), args.runs)
        return
    result = {**measure(args.repo.resolve(), args.runs), "commit": git_commit(args.repo),
              "machine": f"{platform.node()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end"}
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results[args.label] = result
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{'label':<10} {'commit':<34} {'first s':>8} {'median s':>9} {'code cache full':>16}  "
          "slowest steps (median s)")
    for label, res in results.items():
        slowest = sorted(res["median_steps_after_first_s"].items(), key=lambda item: -item[1])[:3]
        print(f"{label:<10} {res['commit']:<34} {res['first_s']:>8.1f} {res['median_after_first_s']:>9.1f} "
              f"{str(res['code_cache_full']):>16}  " + "; ".join(f"{name[:40]} {s:.1f}" for name, s in slowest))


if __name__ == "__main__":
    main()
