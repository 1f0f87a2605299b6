"""Benchmark: the prepare job vs the reference data preparation (Horovod's example) on the same full-scale data.

Generates the 7 raw files at full scale (rossmann_jobs.synth, 1,115 stores, 1,017,209 train rows) unless --raw is
given, then in one Spark session (local[2] by default) measures, in this order:
  1. the prepare job's run_prepare (read + validate + features + 3 sharded Parquet splits + rejected + metadata);
  2. the reference: tests/jobs/seed_reference.data_preparation (RDD loops, Python UDFs), with its train and test
     frames written to Parquet so that both sides do the same work (the reference is lazy otherwise).
Writes bench/out/prepare.json and prints a table. Rows/s counts train.csv rows (the input that dominates).

    PYTHONPATH=.:tests/jobs .venvs/jobs/bin/python bench/bench_prepare.py [--raw DIR] [--skip-reference]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "jobs")]

from rossmann_jobs import storage  # noqa: E402
from rossmann_jobs.spark_session import build_spark_session, stage_progress  # noqa: E402

AS_OF = date(2015, 7, 31)   # the generator's last train day: the reference's view of the whole drop


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", default=None, help="folder with the 7 raw files (default: generate them)")
    parser.add_argument("--stores", type=int, default=1115)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--skip-reference", action="store_true", help="time only the prepare job")
    parser.add_argument("--workdir", default=None, help="where outputs go (default: a temp dir)")
    parser.add_argument("--json", default=str(ROOT / "bench" / "out" / "prepare.json"))
    return parser.parse_args()


def load_average() -> float:
    return round(os.getloadavg()[0], 1)


def timed_run(label: str, fn) -> dict:
    start_load, start = load_average(), time.perf_counter()
    detail = fn()
    seconds = time.perf_counter() - start
    print(f"{label}: {seconds:.1f} s (load {start_load} -> {load_average()})", flush=True)
    return {"seconds": round(seconds, 2), "load_before": start_load, "load_after": load_average(), **(detail or {})}


def main() -> int:
    args = parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-prepare-")
    raw = args.raw
    if raw is None:
        from rossmann_jobs.synth.cli import generate
        from rossmann_jobs.synth.dataset import SynthConfig

        raw = os.path.join(workdir, "raw")
        generate(raw, SynthConfig(stores=args.stores, seed=42))
    # The driver JVM starts before any SparkConf is read, so its heap size must come from the launcher.
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {args.driver_memory} pyspark-shell"
    spark = build_spark_session("bench-prepare", {"spark.master": args.master, "spark.ui.enabled": "false",
                                                   "spark.ui.showConsoleProgress": "false"})
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "spark": spark.version, "master": args.master,
                                 "driver_memory": args.driver_memory},
                     "raw": raw}

    def ours() -> dict:
        from rossmann_jobs.prepare import run_prepare

        metadata = run_prepare(spark, raw, os.path.join(workdir, "features"), AS_OF)
        return {"train_rows_in": metadata["row_counts"]["files"]["train.csv"],
                "rows_out": {k: metadata["row_counts"][k] for k in ("train", "validation", "test")},
                "steps_s": metadata["timings_s"]}

    def reference() -> dict:
        from seed_reference import data_preparation

        _max_sales, _vocab, train_df, test_df = data_preparation(spark, raw)
        train_df.write.parquet(os.path.join(workdir, "reference", "train"))
        test_df.write.parquet(os.path.join(workdir, "reference", "test"))
        return {}

    train_rows = sum(1 for _ in open(os.path.join(raw, "train.csv"), "rb")) - 1
    with stage_progress(spark, interval_s=30):
        results["prepare"] = timed_run("prepare job", ours)
        spark.catalog.clearCache()
        if not args.skip_reference:
            results["reference"] = timed_run("reference data_preparation", reference)
    for side in ("prepare", "reference"):
        if side in results:
            results[side]["train_rows_per_s"] = round(train_rows / results[side]["seconds"])
    if "reference" in results:
        results["speedup"] = round(results["reference"]["seconds"] / results["prepare"]["seconds"], 2)
    results["train_rows"] = train_rows
    spark.stop()

    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as handle:
        json.dump(results, handle, indent=2)
    print(f"\n| implementation | wall s | train rows/s | load (before -> after) |\n|---|---|---|---|")
    for side, label in (("prepare", "prepare job (Spark-native)"), ("reference", "reference (seed)")):
        if side in results:
            r = results[side]
            print(f"| {label} | {r['seconds']:.1f} | {r['train_rows_per_s']:,} | {r['load_before']} -> "
                  f"{r['load_after']} |")
    if "speedup" in results:
        print(f"\nspeed-up: {results['speedup']}x on {train_rows:,} train rows ({args.master})")
    print(f"prepare steps (s): {results['prepare']['steps_s']}")
    if not args.workdir:
        storage.delete_prefix(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
