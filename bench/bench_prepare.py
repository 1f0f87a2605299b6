"""Benchmark: the prepare job vs the reference data preparation (Horovod's example) on the same full-scale data.

Generates the 7 raw files at full scale (rossmann_jobs.synth, 1,115 stores, 1,017,209 train rows) unless --raw is
given, then in one Spark session (local[2] by default) measures, in this order:
  1. the prepare job's run_prepare, cold (the JVM's first work: JIT, code generation), as spark-submit runs it:
     read + validate + features + 3 sharded Parquet splits + rejected + metadata;
  2. (not reported) the reference on a small generated drop, to warm its own code paths;
  3. run_prepare again, warm;
  4. the reference, warm: testkit/horovod_reference.data_preparation (RDD loops, Python UDFs), with its train and
     test frames written to Parquet so that both sides do the same work (the reference is lazy otherwise).
The speed-up compares the two warm runs (same JVM state); the cold run's ratio is reported too.
Wall time, and CPU seconds of the whole process tree (driver, JVM, Python workers), which the other jobs on a
shared machine disturb less than wall time. Writes bench/out/prepare.json and prints a table. Rows/s counts
train.csv rows (the input that dominates).

    PYTHONPATH=. .venvs/jobs/bin/python bench/bench_prepare.py [--raw DIR] [--skip-reference]
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

from rossmann_jobs import storage
from rossmann_jobs.spark_session import build_spark_session, stage_progress

ROOT = Path(__file__).resolve().parents[1]

AS_OF = date(2015, 7, 31)   # the generator's last train day: the reference's view of the whole drop
SIDES = {"prepare_cold": "prepare job, cold JVM", "prepare": "prepare job, warm JVM",
         "reference": "reference (seed), warm JVM"}
WARMUP_STORES = 20


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


def tree_cpu_seconds() -> float:
    """User + system CPU of this process and all its live descendants (the JVM and its Python workers), including
    the children they have reaped (Python workers that exited, e.g. the reference's UDF and RDD workers)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except psutil.NoSuchProcess:
            pass
    return total


# Linux keeps the first 15 characters of a thread's name ("Executor task l", "C2 CompilerThre").
JVM_THREAD_KINDS = {"Executor task": "spark tasks", "CompilerThre": "JIT compiler", "GC Thread": "GC", "G1 ": "GC",
                    "VM Thread": "GC"}


def jvm_thread_cpu() -> dict[str, float]:
    """CPU seconds per kind of thread of the driver JVM (Linux /proc): where the JVM's CPU goes, e.g. how much of
    it the JIT compiler takes from the tasks on a small machine. Empty where /proc or the JVM is missing."""
    import psutil

    jvms = [p for p in psutil.Process().children(recursive=True) if p.name() == "java"]
    totals: dict[str, float] = {}
    for tid in (os.listdir(f"/proc/{jvms[0].pid}/task") if jvms else []):
        try:
            with open(f"/proc/{jvms[0].pid}/task/{tid}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        kind = next((k for prefix, k in JVM_THREAD_KINDS.items() if prefix in name), "other (driver, planning)")
        totals[kind] = totals.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return totals


def timed_run(label: str, fn) -> dict:
    start_load, start_cpu, start_threads = load_average(), tree_cpu_seconds(), jvm_thread_cpu()
    start = time.perf_counter()
    detail = fn()
    seconds, cpu = time.perf_counter() - start, tree_cpu_seconds() - start_cpu
    threads = {kind: round(total - start_threads.get(kind, 0.0), 1) for kind, total in jvm_thread_cpu().items()}
    print(f"{label}: {seconds:.1f} s wall, {cpu:.1f} CPU s (load {start_load} -> {load_average()}); JVM threads' "
          f"CPU s: {threads}", flush=True)
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 1), "jvm_thread_cpu_seconds": threads,
            "load_before": start_load, "load_after": load_average(), **(detail or {})}


def generate_raw(out: str, stores: int) -> str:
    from rossmann_jobs.synth.cli import generate
    from rossmann_jobs.synth.dataset import SynthConfig

    generate(out, SynthConfig(stores=stores, seed=42))
    return out


def main() -> int:
    args = parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-prepare-")
    raw = args.raw or generate_raw(os.path.join(workdir, "raw"), args.stores)
    warmup_raw = generate_raw(os.path.join(workdir, "warmup_raw"), WARMUP_STORES)
    # The driver JVM starts before any SparkConf is read, so its heap size must come from the launcher.
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {args.driver_memory} pyspark-shell"
    spark = build_spark_session("bench-prepare", {"spark.master": args.master, "spark.ui.enabled": "false",
                                                   "spark.ui.showConsoleProgress": "false"})
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "spark": spark.version, "master": args.master,
                                 "driver_memory": args.driver_memory},
                     "raw": raw}

    tracker = spark.sparkContext.statusTracker()

    def last_job_id() -> int:
        # Job ids are sequential; the tracker keeps only the latest ones, so count by id, not by list length.
        return max(tracker.getJobIdsForGroup(), default=-1)

    def ours(source: str) -> dict:
        from rossmann_jobs.prepare import run_prepare

        jobs_before = last_job_id()
        metadata = run_prepare(spark, source, os.path.join(workdir, "features"), AS_OF)  # each run replaces it
        spark_jobs = last_job_id() - jobs_before
        shard_rows = [shard["rows"] for shard in metadata["shards"]["train"]]
        return {"train_rows_in": metadata["row_counts"]["files"]["train.csv"],
                "rows_out": {k: metadata["row_counts"][k] for k in ("train", "validation", "test")},
                "train_shard_rows": {"min": min(shard_rows), "max": max(shard_rows), "files": len(shard_rows)},
                "spark_jobs": spark_jobs, "steps_s": metadata["timings_s"]}

    def reference(source: str, out: str) -> dict:
        from testkit.horovod_reference import data_preparation

        _max_sales, _vocab, train_df, test_df = data_preparation(spark, source)
        train_df.write.parquet(os.path.join(out, "train"))
        test_df.write.parquet(os.path.join(out, "test"))
        return {}

    train_rows = sum(1 for _ in open(os.path.join(raw, "train.csv"), "rb")) - 1
    with stage_progress(spark, interval_s=30):
        # Cold: the first work of a fresh JVM (JIT, code generation), as each spark-submit of the job pays it.
        results["prepare_cold"] = timed_run("prepare job, cold", lambda: ours(raw))
        spark.catalog.clearCache()
        if not args.skip_reference:
            # Warm the reference's own code paths (Python workers, RDD and UDF stages) on a small drop.
            timed_run("reference warm-up (small drop)",
                      lambda: reference(warmup_raw, os.path.join(workdir, "reference_warmup")))
            spark.catalog.clearCache()
        results["prepare"] = timed_run("prepare job, warm", lambda: ours(raw))
        spark.catalog.clearCache()
        if not args.skip_reference:
            results["reference"] = timed_run("reference data_preparation, warm",
                                             lambda: reference(raw, os.path.join(workdir, "reference")))
    for side in SIDES:
        if side in results:
            results[side]["train_rows_per_s"] = round(train_rows / results[side]["seconds"])
    if "reference" in results:
        for side in ("prepare", "prepare_cold"):
            results[side]["speedup_wall"] = round(results["reference"]["seconds"] / results[side]["seconds"], 2)
            results[side]["speedup_cpu"] = round(results["reference"]["cpu_seconds"] / results[side]["cpu_seconds"], 2)
    results["train_rows"] = train_rows
    spark.stop()

    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as handle:
        json.dump(results, handle, indent=2)
    print("\n| run | wall s | CPU s | train rows/s | speed-up over the reference, wall / CPU | load (before -> after) |"
          "\n|---|---|---|---|---|---|")
    for side in SIDES:
        if side in results:
            r = results[side]
            speedup = f"{r['speedup_wall']}x / {r['speedup_cpu']}x" if "speedup_wall" in r else ""
            print(f"| {SIDES[side]} | {r['seconds']:.1f} | {r['cpu_seconds']:.1f} | {r['train_rows_per_s']:,} | "
                  f"{speedup} | {r['load_before']} -> {r['load_after']} |")
    print(f"\n{train_rows:,} train rows, {args.master}; train shards: {results['prepare']['train_shard_rows']}")
    print(f"Spark jobs per prepare run: {results['prepare']['spark_jobs']}")
    print(f"prepare steps, cold (s): {results['prepare_cold']['steps_s']}")
    print(f"prepare steps, warm (s): {results['prepare']['steps_s']}")
    for side in SIDES:
        if side in results:
            print(f"JVM threads' CPU s, {SIDES[side]}: {results[side]['jvm_thread_cpu_seconds']}")
    if not args.workdir:
        storage.delete_prefix(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
