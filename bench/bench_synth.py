"""Benchmark of the synthetic data generator at full scale: time, throughput, bytes written, peak memory.

    PYTHONPATH=. .venvs/jobs/bin/python bench/bench_synth.py [--stores 1115] [--repeat 3]

Writes bench/out/synth.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time

from rossmann_jobs.synth import cli
from rossmann_jobs.synth.dataset import RAW_FILES, SynthConfig, build_dataset

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def machine() -> dict:
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpus": os.cpu_count(), "memory_gib": round(memory_gib, 1), "python": platform.python_version(),
            "platform": platform.platform(), "load_average_1m": round(os.getloadavg()[0], 2)}


def run_once(stores: int, seed: int, folder: str) -> dict:
    start = time.perf_counter()
    dataset = build_dataset(SynthConfig(stores=stores, seed=seed))
    built = time.perf_counter()
    cli.write_files(dataset, folder)
    cli.write_truth(dataset, folder + ".truth.json")
    written = time.perf_counter()
    csv_bytes = sum(os.path.getsize(os.path.join(folder, name)) for name in RAW_FILES)
    rows = sum(dataset.truth["row_counts"].values())
    return {"build_s": round(built - start, 3), "write_s": round(written - built, 3),
            "total_s": round(written - start, 3), "rows": rows,
            "train_rows": dataset.truth["row_counts"]["train.csv"], "csv_mb": round(csv_bytes / 1e6, 2),
            "rows_per_s": round(rows / (written - start))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=int, default=1115)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="bench-synth-")
    try:
        runs = [run_once(args.stores, args.seed, os.path.join(scratch, f"raw{i}")) for i in range(args.repeat)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    best = min(runs, key=lambda run: run["total_s"])
    result = {"benchmark": "synth", "stores": args.stores, "seed": args.seed, "runs": runs, "best": best,
              "peak_rss_mb": round(peak_rss_mb, 1), "machine": machine()}
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "synth.json"), "w") as handle:
        json.dump(result, handle, indent=2)

    header = f"{'run':>4} {'rows':>10} {'build s':>8} {'write s':>8} {'total s':>8} {'rows/s':>10} {'CSV MB':>7}"
    print(header)
    for i, run in enumerate(runs, 1):
        print(f"{i:>4} {run['rows']:>10,} {run['build_s']:>8.2f} {run['write_s']:>8.2f} {run['total_s']:>8.2f} "
              f"{run['rows_per_s']:>10,} {run['csv_mb']:>7.1f}")
    print(f"peak RSS {peak_rss_mb:,.0f} MB; machine {result['machine']}")
    print(f"wrote {os.path.join(OUT_DIR, 'synth.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
