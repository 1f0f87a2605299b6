"""Benchmark: how each job's wall time and memory grow with the number of stores (1x, 3x, 10x Rossmann's 1,115).

For each scale it runs, as the DAG does (spark-submit, local[2], the DAG's Spark sizing: prepare's driver 2g):
  1. the generator (`python -m rossmann_jobs.synth generate`), the 7 raw files of S stores;
  2. prepare for as-of 2015-07-31 (strict point in time);
  3. train, cold start, the DAG's default model and batch, --epochs 1 (one full pass over the train split) on
     --num-proc Horovod ranks;
  4. predict with that model: the whole horizon plus the validation window, submission and report.
Per step: wall time, peak memory of the whole process tree (spark-submit's JVM, the Python driver, Spark's Python
workers, the Horovod ranks: PSS summed, sampled every 0.25 s), and for Spark jobs the bytes Spark spilled (its event
log). Fits time = a x rows^k per step against the rows it handled (least squares on logs; k = 1 is linear) and,
since every job pays a fixed start-up, time = fixed + rows / rows_per_s; draws a log-log plot. Writes
bench/out/scaling.json and bench/figures/scaling.png, and prints a table.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/bench_scaling.py \
        [--scales 1,3,10] [--workdir DIR]

A step whose output is already committed in --workdir by an earlier run with the same arguments is not run again
(its recorded measurement is reused), so an interrupted run can be continued.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil

from rossmann_jobs import storage
from rossmann_jobs.model.trust import STORAGE_ROOT_ENV
from testkit.job_process import spilled_bytes  # testkit/job_process.py

REPO = Path(__file__).resolve().parents[1]

BASE_STORES = 1115
AS_OF = "2015-07-31"
STEPS = ("generate", "prepare", "train", "predict")


class PeakMemory:
    """Peak memory of a process and all its descendants, sampled in a thread while it runs: the sum of their PSS
    (each shared page split between its sharers; RSS would count the JVM twice whenever it spawns a helper
    process, which briefly shares its address space), and the largest single RSS."""

    def __init__(self, pid: int, interval_s: float = 0.25):
        self.peak_bytes, self.peak_single_bytes = 0, 0
        self._root, self._stop = psutil.Process(pid), threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval_s,), daemon=True)
        self._thread.start()

    def _sample(self, interval_s: float) -> None:
        while not self._stop.is_set():
            try:
                processes = [self._root, *self._root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            proportional, resident = [], []
            for process in processes:
                try:
                    info = process.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                proportional.append(info.pss)
                resident.append(info.rss)
            self.peak_bytes = max(self.peak_bytes, sum(proportional))
            self.peak_single_bytes = max(self.peak_single_bytes, max(resident, default=0))
            self._stop.wait(interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_step(name: str, command: list[str], log_path: Path, env: dict[str, str]) -> dict:
    """Run command to completion; its wall time and peak memory (exits the bench on failure, showing the log)."""
    print(f"{datetime.now():%H:%M:%S}   {name}: {' '.join(command[-8:])}", flush=True)
    started = time.perf_counter()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        memory = PeakMemory(process.pid)
        code = process.wait()
        memory.stop()
    wall_s = time.perf_counter() - started
    if code != 0:
        sys.exit(f"{name} failed (exit {code}); log {log_path}:\n{log_path.read_text()[-4000:]}")
    return {"wall_s": round(wall_s, 1), "peak_tree_mb": round(memory.peak_bytes / 2 ** 20),
            "peak_process_mb": round(memory.peak_single_bytes / 2 ** 20)}


def spark_submit(job: str, args: list[str], driver_memory: str, events: Path) -> list[str]:
    events.mkdir(parents=True, exist_ok=True)
    return ["spark-submit", "--master", "local[2]", "--driver-memory", driver_memory,
            "--conf", "spark.ui.enabled=false", "--conf", "spark.eventLog.enabled=true",
            "--conf", f"spark.eventLog.dir={events.as_uri()}", str(REPO / "rossmann_jobs" / f"{job}.py"), *args]


def measure_scale(scale: int, args: argparse.Namespace, work: Path, env: dict[str, str]) -> dict:
    stores = args.base_stores * scale
    folder = work / f"x{scale}"
    folder.mkdir(parents=True, exist_ok=True)
    # The jobs load models only from their storage root's runs/ (rossmann_jobs/model/trust.py): the folder is the
    # root (main sets ROSSMANN_STORAGE_ROOT per scale), the model lies under its runs/.
    raw, features, model, forecast = (str(folder / name) for name in ("raw", "features", "runs/model", "forecast"))
    done_file = folder / "measured.json"
    done = json.loads(done_file.read_text()) if done_file.exists() else {}
    commands = {
        "generate": [sys.executable, "-m", "rossmann_jobs.synth", "generate", "--stores", str(stores),
                     "--seed", str(args.seed), "--out", raw],
        "prepare": spark_submit("prepare", ["--raw", raw, "--out", features, "--as-of", AS_OF],
                                args.prepare_driver_memory, folder / "events-prepare"),
        "train": spark_submit("train", ["--features", features, "--out", model, "--epochs", str(args.epochs),
                                        "--num-proc", str(args.num_proc), "--no-resume"],
                              args.driver_memory, folder / "events-train"),
        "predict": spark_submit("predict", ["--model", model, "--features", features, "--raw", raw,
                                            "--out", forecast], args.driver_memory, folder / "events-predict"),
    }
    outputs = {"generate": raw, "prepare": features, "train": model, "predict": forecast}
    result = {"scale": scale, "stores": stores, "steps": {}}
    for step in STEPS:
        committed = step == "generate" and Path(raw, "train.csv").exists() or \
            storage.exists(storage.join(outputs[step], storage.MANIFEST_NAME))
        if step in done and done[step]["command"] == commands[step] and committed:
            result["steps"][step] = done[step]
            print(f"{datetime.now():%H:%M:%S}   {step}: reused from {done_file}", flush=True)
            continue
        if step != "generate":
            storage.delete_prefix(outputs[step])
        events = folder / f"events-{step}"
        for old in events.glob("*") if events.exists() else []:
            old.unlink()
        measured = {**run_step(step, commands[step], folder / f"{step}.log", env), "command": commands[step]}
        if events.exists():
            measured["spilled"] = spilled_bytes(events)
        measured.update(step_facts(step, raw, features, model, forecast))
        result["steps"][step] = done[step] = measured
        done_file.write_text(json.dumps(done, indent=1))
    return result


def step_facts(step: str, raw: str, features: str, model: str, forecast: str) -> dict:
    """The rows each step handled, and the job's own timings where it records them."""
    if step == "generate":
        train_csv = Path(raw, "train.csv")
        with open(train_csv, "rb") as handle:
            rows = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 24), b"")) - 1
        return {"rows": rows, "train_csv_mb": round(train_csv.stat().st_size / 2 ** 20, 1)}
    if step == "prepare":
        metadata = storage.read_json(storage.join(storage.committed_uri(features), "metadata.json"))
        return {"rows": sum(metadata["row_counts"]["files"]["train.csv"].values()),
                "split_rows": {name: metadata["row_counts"][name] for name in ("train", "validation", "test")},
                "timings_s": metadata["timings_s"]}
    if step == "train":
        metrics = storage.read_json(storage.join(storage.committed_uri(model), "metrics.json"))
        return {"rows": metrics["train_rows_total"], "validation_rows": metrics["validation_rows_total"],
                "timings_s": metrics["timings_seconds"], "epochs": metrics["epochs"],
                "samples_per_second": metrics["mean_samples_per_second"],
                "best_val_exp_rmspe": metrics["best_val_exp_rmspe"]}
    summary = storage.read_manifest(forecast)["summary"]
    return {"rows": summary["rows"]["test"] + summary["rows"]["validation"], "timings_s": summary["timings_s"],
            "validation_exp_rmspe": summary["validation_exp_rmspe"]}


def fit_exponent(points: list[tuple[float, float]]) -> float | None:
    """k in time = a x rows^k, least squares on (log rows, log time)."""
    if len(points) < 2:
        return None
    xs, ys = [math.log(x) for x, _ in points], [math.log(y) for _, y in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return round(sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread, 3) if spread else None


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(intercept, slope) of time = intercept + slope x rows, least squares."""
    if len(points) < 2:
        return None
    mean_x, mean_y = sum(x for x, _ in points) / len(points), sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if not spread:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    return mean_y - slope * mean_x, slope


def growth(results: list[dict]) -> dict:
    """Per step: the exponents k of wall time and peak memory against the rows it handled (time = a x rows^k),
    and the split of wall time into a fixed start-up and a per-row cost (time = fixed + rows / rows_per_s), which
    separates the JVM, Spark and Horovod start-up from the work that grows with the data."""
    fits = {}
    for step in STEPS:
        measured = [r["steps"][step] for r in results if step in r["steps"]]
        line = fit_line([(m["rows"], m["wall_s"]) for m in measured])
        fits[step] = {"time_k": fit_exponent([(m["rows"], m["wall_s"]) for m in measured]),
                      "memory_k": fit_exponent([(m["rows"], m["peak_tree_mb"]) for m in measured]),
                      "fixed_s": round(line[0], 1) if line else None,
                      "rows_per_s": round(1 / line[1]) if line and line[1] > 0 else None}
    return fits


def plot(results: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (time_axis, memory_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    for step in STEPS:
        points = [(r["stores"], r["steps"][step]) for r in results if step in r["steps"]]
        stores = [s for s, _ in points]
        time_axis.plot(stores, [m["wall_s"] for _, m in points], "o-", label=step)
        memory_axis.plot(stores, [m["peak_tree_mb"] / 1024 for _, m in points], "o-", label=step)
    if results:
        low = results[0]
        reference = [low["steps"]["prepare"]["wall_s"] * r["stores"] / low["stores"] for r in results]
        time_axis.plot([r["stores"] for r in results], reference, ":", color="grey", label="linear (from prepare 1x)")
    for axis, label in ((time_axis, "wall time, s"), (memory_axis, "peak memory of the process tree, GiB")):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("stores")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    time_axis.set_title("Wall time per job (2 cores, local[2])")
    memory_axis.set_title("Peak memory per job")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def table(results: list[dict], fits: dict) -> str:
    header = " | ".join(f"{r['scale']}x ({r['stores']:,} stores)" for r in results)
    lines = [f"| step | {header} | time k | memory k | fixed s | rows/s beyond it |",
             "|---|" + "---|" * len(results) + "---|---|---|---|"]
    for step in STEPS:
        cells = []
        for r in results:
            m = r["steps"].get(step)
            if not m:
                cells.append("")
                continue
            spill = m.get("spilled", {}).get("disk_spilled", 0)
            cells.append(f"{m['wall_s']:.0f} s, {m['peak_tree_mb'] / 1024:.2f} GiB"
                         + (f", spilled {spill / 2 ** 20:.1f} MiB" if spill else "") + f", {m['rows']:,} rows")
        fit = fits[step]
        lines.append(f"| {step} | " + " | ".join(cells)
                     + f" | {fit['time_k']} | {fit['memory_k']} | {fit['fixed_s']} | {fit['rows_per_s']:,} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1,3,10", help="multiples of --base-stores")
    parser.add_argument("--base-stores", type=int, default=BASE_STORES, help="1x (default: Rossmann's 1,115)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--num-proc", type=int, default=2, help="Horovod ranks")
    parser.add_argument("--prepare-driver-memory", default="2g", help="the DAG's default for prepare")
    parser.add_argument("--driver-memory", default="1g", help="spark-submit's default, as the DAG runs train/predict")
    parser.add_argument("--workdir", default=None, help="default: a temporary folder, removed afterwards")
    parser.add_argument("--json", default=str(REPO / "bench" / "out" / "scaling.json"))
    parser.add_argument("--plot", default=str(REPO / "bench" / "figures" / "scaling.png"))
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="rossmann-scaling-"))
    jobs_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{jobs_bin}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO)}
    results = []
    for scale in (int(s) for s in args.scales.split(",")):
        print(f"{datetime.now():%H:%M:%S} scale {scale}x: {args.base_stores * scale:,} stores", flush=True)
        results.append(measure_scale(scale, args, work, {**env, STORAGE_ROOT_ENV: str(work / f"x{scale}")}))
    fits = growth(results)
    record = {"benchmark": "scaling", "recorded_at": datetime.now(timezone.utc).isoformat(),
              "machine": {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2 ** 30, 1),
                          "python": platform.python_version(), "load_avg_1m_at_end": os.getloadavg()[0]},
              "settings": {"as_of": AS_OF, "epochs": args.epochs, "num_proc": args.num_proc,
                           "prepare_driver_memory": args.prepare_driver_memory,
                           "driver_memory": args.driver_memory, "master": "local[2]"},
              "results": results, "growth": fits}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(record, indent=1))
    plot(results, Path(args.plot))
    print(table(results, fits))
    print(f"JSON {args.json}, plot {args.plot}, work dir {work}")


if __name__ == "__main__":
    main()
