"""The job-side tests' in-process JVM: C1 only (the DAG's small-drop setting) against tiered C1+C2, on one module set.

The job-side suite runs one long-lived driver JVM (tests/jobs/conftest.py builds its options from
PYSPARK_SUBMIT_ARGS) through hundreds of small queries for half an hour; the DAG's jobs are short JVMs, where C1
wins. Runs pytest on the modules once per variant, alternated over --rounds, and records wall and CPU seconds (the
pytest process tree's user + system time, sampled: bench/tree_cpu.py), pass/fail counts, and the machine. Writes
bench/out/test_jit.json and prints a table.

    PATH=.venvs/jobs/bin:$PATH .venvs/jobs/bin/python bench/bench_test_jit.py [--rounds 1] [--modules a.py,b.py]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from tree_cpu import TreeCpu  # bench/, this script's folder

REPO = Path(__file__).resolve().parents[1]
CLASS_ARCHIVE = REPO / ".venvs" / "jobs" / "spark-classes.jsa"
MODULES = ["test_features_transforms.py", "test_features_validate.py", "test_prepare_bad_input.py",
           "test_prepare_drop_integrity.py", "test_recent_level.py", "test_quantiles_point_in_time.py",
           "test_score_job.py"]
VARIANTS = {"c1-only": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m",
            "tiered": "-XX:ReservedCodeCacheSize=240m"}


def run(variant: str, modules: list[str]) -> dict:
    options = VARIANTS[variant] + (f" -XX:SharedArchiveFile={CLASS_ARCHIVE}" if CLASS_ARCHIVE.is_file() else "")
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--driver-java-options '{options}' pyspark-shell"}
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "pytest", *(f"tests/jobs/{m}" for m in modules), "-q",
                                "-p", "no:cacheprovider"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    tree = TreeCpu(process.pid)   # the driver JVM is pyspark's child, which pytest never waits for
    output, _ = process.communicate()
    cpu = tree.stop()
    wall = time.perf_counter() - started
    summary = output.strip().splitlines()[-1]
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|error)", summary)}
    return {"variant": variant, "java_options": options, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "counts": counts, "exit_code": process.returncode, "load_average": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--modules", default=",".join(MODULES))
    parser.add_argument("--order", default="c1-only,tiered", help="variants in the order of each round")
    args = parser.parse_args()
    modules, order = args.modules.split(","), args.order.split(",")
    results = []
    for round_index in range(args.rounds):
        for variant in order if round_index % 2 == 0 else list(reversed(order)):   # alternated
            results.append({"round": round_index + 1, **run(variant, modules)})
            print(json.dumps(results[-1]), flush=True)
    out = REPO / "bench" / "out" / "test_jit.json"
    out.parent.mkdir(exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    out.write_text(json.dumps({"benchmark": "test_jit", "modules": modules, "commit": commit, "results": results,
                               "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                           "python": platform.python_version()}}, indent=1))
    print("| round | variant | wall s | CPU s | passed | failed |\n|---|---|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['round']} | {r['variant']} | {r['wall_s']} | {r['cpu_s']} | {r['counts'].get('passed', 0)} | "
              f"{r['counts'].get('failed', 0) + r['counts'].get('error', 0)} |")
    print(f"JSON: {out}")


if __name__ == "__main__":
    main()
