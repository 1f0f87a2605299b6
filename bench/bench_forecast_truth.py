"""Forecast quality against the generator's truth: strict point-in-time vs the seed's time travel vs naive baseline.

For one as-of date D (default 2015-07-31, whose horizon is the Kaggle test period) and N generated stores:
  strict      a realistic drop for D (weather and trend only up to D, test.csv = the plan for D+1..D+48),
              prepare --point-in-time strict (the product's default);
  seed        the full snapshot (future weather and trend included), prepare --point-in-time seed, i.e. the
              Horovod example's joins;
then train and predict with the same settings, and score each submission.csv against the truth's hidden sales of
the horizon (exp-RMSPE over Sales > 0), beside the naive seasonal baseline that predict writes next to the model's
forecast (store x day-of-week x promo median over the last 365 days up to D) and the noise floor (the noise-free
expected sales scored the same way). Wall time per job is recorded too. Writes bench/out/forecast_truth.json and
prints a table.

    PATH=.venvs/jobs/bin:$PATH .venvs/jobs/bin/python bench/bench_forecast_truth.py --stores 30 [--epochs 10]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rossmann_jobs import storage  # noqa: E402
from rossmann_jobs.forecast.baseline import BASELINE_COL  # noqa: E402
from rossmann_jobs.synth.cli import expected_values_uri, generate, land  # noqa: E402
from rossmann_jobs.synth.dataset import SynthConfig  # noqa: E402


def exp_rmspe(actual: np.ndarray, forecast: np.ndarray) -> float:
    keep = actual > 0
    return float(np.sqrt(np.mean(((actual[keep] - forecast[keep]) / actual[keep]) ** 2)))


def spark_submit(job: str, args: list[str], log_path: Path, driver_memory: str = "2g") -> float:
    """Runs one job like the DAG does (spark-submit, local[2]); returns its wall time in seconds."""
    jobs_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{jobs_bin}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO)}
    command = [str(jobs_bin / "spark-submit"), "--master", "local[2]", "--driver-memory", driver_memory,
               "--conf", "spark.ui.enabled=false", str(REPO / "rossmann_jobs" / f"{job}.py"), *args]
    started = time.perf_counter()
    with open(log_path, "w") as log:
        code = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        sys.exit(f"{job} failed (exit {code}); log: {log_path}\n{log_path.read_text()[-3000:]}")
    return time.perf_counter() - started


def run_variant(name: str, raw: str, mode: str, as_of: str, work: Path, train_args: list[str]) -> dict:
    out = work / name
    out.mkdir(parents=True, exist_ok=True)
    features, model, predictions = (str(out / part) for part in ("features", "model", "predictions"))
    timings = {
        "prepare": spark_submit("prepare", ["--raw", raw, "--out", features, "--as-of", as_of,
                                            "--point-in-time", mode], out / "prepare.log"),
        "train": spark_submit("train", ["--features", features, "--out", model, *train_args], out / "train.log"),
        "predict": spark_submit("predict", ["--model", model, "--features", features, "--raw", raw,
                                            "--out", predictions], out / "predict.log"),
    }
    attempt = storage.committed_uri(predictions)
    submission = pd.read_csv(storage.join(attempt, "submission.csv"))
    rows = pd.read_parquet(storage.join(attempt, "predictions"))
    rows = rows[rows["split"] == "test"] if "split" in rows else rows
    metrics = json.loads(Path(storage.committed_uri(model), "metrics.json").read_text())
    return {"submission": submission, "baseline": rows[["Id", BASELINE_COL]].dropna(subset=["Id"]),
            "timings_s": {k: round(v, 1) for k, v in timings.items()},
            "val_exp_rmspe": metrics.get("best_val_exp_rmspe"), "epochs_run": metrics.get("epochs_run")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--as-of", default="2015-07-31")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--variants", default="strict,seed")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", default=str(REPO / "bench" / "out" / "forecast_truth.json"))
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="rossmann-bench-truth-"))
    config = SynthConfig(stores=args.stores, seed=args.seed)
    as_of = dt.date.fromisoformat(args.as_of)
    full, drops = str(work / "full"), str(work / "drops")
    generate(full, config)
    land(drops, as_of, as_of, config)
    truth = pd.read_parquet(expected_values_uri(full + ".truth.json"))
    train_args = ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                  "--learning-rate", str(args.learning_rate), "--num-proc", str(args.num_proc)]

    sources = {"strict": (storage.join(drops, as_of.isoformat()), "strict"), "seed": (full, "seed")}
    # The horizon's truth: the hidden sales (and mu) of the drop's test.csv rows, matched on (Store, Date).
    horizon = pd.read_csv(storage.join(drops, as_of.isoformat(), "test.csv"), usecols=["Id", "Store", "Date"])
    horizon["Date"] = pd.to_datetime(horizon["Date"])
    truth["Date"] = pd.to_datetime(truth["Date"])
    truth_cols = ["Store", "Date", "Sales", "ExpectedSales"]
    horizon = horizon.merge(truth[truth_cols].drop_duplicates(["Store", "Date"]), on=["Store", "Date"], how="left")
    results = {"noise floor (expected sales)": {"exp_rmspe": exp_rmspe(horizon["Sales"].to_numpy(float),
                                                                       horizon["ExpectedSales"].to_numpy(float))}}
    for name in args.variants.split(","):
        raw, mode = sources[name]
        run = run_variant(name, raw, mode, args.as_of, work, train_args)
        # Ids of the full snapshot's test.csv and of the realistic drop's plan coincide for 2015-07-31 only, so
        # match each variant's submission through its own raw test.csv.
        plan = pd.read_csv(storage.join(raw, "test.csv"), usecols=["Id", "Store", "Date"])
        plan["Date"] = pd.to_datetime(plan["Date"])
        scored = (plan.merge(run["submission"], on="Id").merge(run["baseline"], on="Id", how="left")
                  .merge(horizon[["Store", "Date", "Sales"]].rename(columns={"Sales": "Actual"}), on=["Store", "Date"]))
        actual = scored["Actual"].to_numpy(float)
        results[f"model, {name}"] = {"exp_rmspe": exp_rmspe(actual, scored["Sales"].to_numpy(float)),
                                     "val_exp_rmspe": run["val_exp_rmspe"], "epochs_run": run["epochs_run"],
                                     "timings_s": run["timings_s"], "rows": int((actual > 0).sum())}
        results[f"naive baseline, {name} features"] = {
            "exp_rmspe": exp_rmspe(actual, scored[BASELINE_COL].fillna(0).to_numpy(float))}

    floor = results["noise floor (expected sales)"]["exp_rmspe"]
    record = {"benchmark": "forecast_truth", "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform()},
              "args": vars(args), "horizon_rows": int(len(horizon)), "results": results}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(record, indent=2, default=str))
    print(f"\n{args.stores} stores, as-of {args.as_of}, horizon {len(horizon)} rows; {args.epochs} epochs, "
          f"batch {args.batch_size}, lr {args.learning_rate}, {args.num_proc} ranks\n")
    print("| forecast | test exp-RMSPE vs truth | x noise floor | val exp-RMSPE | prepare s | train s | predict s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, values in results.items():
        t = values.get("timings_s", {})
        val = values.get("val_exp_rmspe")
        print(f"| {name} | {values['exp_rmspe']:.4f} | {values['exp_rmspe'] / floor:.2f} | "
              f"{'' if val is None else f'{val:.4f}'} | {t.get('prepare', '')} | {t.get('train', '')} | "
              f"{t.get('predict', '')} |")
    print(f"\nJSON: {args.json}; work dir: {work}")


if __name__ == "__main__":
    main()
