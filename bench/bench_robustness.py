"""Forecast quality across generator scenarios and scales: the product, the naive baseline and LightGBM, scored.

For each scenario (rossmann_jobs/synth/scenarios.py: baseline, growth, shifts, weather-strong, ...) and store
count, generates the data set once, lands the realistic drop for as-of D (default 2015-07-31, whose horizon is the
Kaggle test period) and runs the real jobs with spark-submit (local[2], like the DAG, bench_forecast_truth's
spark_submit): prepare (its default point-in-time mode, strict), train (the product's defaults: only --num-proc 2,
plus --train-args) and predict. Scores the horizon rows with Sales > 0 against the generator's truth (exp-RMSPE):
  model      the predict job's submission.csv
  naive      the naive seasonal baseline that predict writes beside every forecast
  LightGBM   a reference trained with pandas on the same prepared train split (early stopping on the validation
             split), predicting the prepared test split; closed days (Open == 0) forecast 0 like predict does
  floor      the point-in-time floor: the expected sales as known on D (synth/point_in_time_floor.py)
beside the median horizon bias (median of forecast / point-in-time expected sales; per lead week for the model),
the quantile forecasts' P10-P90 coverage and weighted quantile loss (forecast_quantiles.csv and the naive baseline's
quantiles in predictions/, beside the exact quantiles of the generated sales and the noise's quantiles around the
point-in-time expectation; overall and per lead week),
the model's val exp-RMSPE and gate scores (metrics.json), each job's wall time, the machine and the benchmarked
commit. Merges the results per (scenario, stores) into bench/out/robustness_<label>.json, draws
bench/out/robustness_<label>.png (per store count, per scenario: model, naive and LightGBM over the floor) and
prints a markdown table of every result in that JSON.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/bench_robustness.py \
        --scenarios baseline,growth --stores 150,1115 [--as-of 2015-07-31] [--seed 7] [--workdir DIR] [--label after] \
        [--repo PATH] [--train-args "--epochs 20"] [--compare before] [--no-lightgbm]

Before/after on one machine: `git worktree add /tmp/before <commit>`, then run with `--repo /tmp/before --label
before` and without --repo as `--label after`, then `--compare before` to draw both. --repo only changes where the
jobs (scripts and PYTHONPATH) come from: the data are generated, landed and scored by this checkout. A --workdir is
reused: committed job outputs with the same arguments are not run again. Outputs lie under
<workdir>/<scenario>-<stores>/<label>/, so reuse one label per checkout. LightGBM is a bench-only dependency
(`.venvs/jobs/bin/pip install lightgbm`).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import importlib.util
import io
import json
import os
import platform
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from types import ModuleType

import bench_forecast_truth as truth_bench  # bench/, this script's folder
import numpy as np
import pandas as pd
from bench_forecast_truth import REPO, train_and_predict

from rossmann_jobs import storage
from rossmann_jobs.forecast.baseline import BASELINE_COL
from rossmann_jobs.metrics import exp_rmspe
from rossmann_jobs.output_layout import (
    PREDICTIONS_DIR,
    QUANTILES_FILE,
    SUBMISSION_FILE,
    TEST_DIR,
    TRAIN_DIR,
    VALIDATION_DIR,
)
from rossmann_jobs.synth.cli import generate, land
from rossmann_jobs.synth.scenarios import SCENARIOS, scenario_config
from rossmann_jobs.synth.truth_scores import horizon_truth, score_forecast, score_quantiles

QUALITY_BARS = (1.05, 1.10)   # x point-in-time floor: the quality bar (1.10) and a tighter one
FORECASTS = ("model", "naive", "LightGBM")
LGBM_PARAMS = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 63, "num_threads": 2, "verbose": -1,
               "seed": 7}
LGBM_ROUNDS, LGBM_EARLY_STOP = 2000, 50


def log(message: str) -> None:
    print(f"{dt.datetime.now():%H:%M:%S} {message}", flush=True)


@contextlib.contextmanager
def jobs_from(repo: Path):
    """bench_forecast_truth.spark_submit runs the jobs of its module's REPO (scripts and PYTHONPATH); pointing that
    at another checkout for the call reuses its skip-if-committed and timing logic instead of copying it."""
    saved = truth_bench.REPO
    truth_bench.REPO = repo
    try:
        yield
    finally:
        truth_bench.REPO = saved


def load_spec(repo: Path) -> ModuleType:
    """The benchmarked checkout's features/spec.py (its feature set may differ from this checkout's)."""
    loader = importlib.util.spec_from_file_location("benchmarked_spec", repo / "rossmann_jobs" / "features" / "spec.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def git_state(repo: Path) -> dict:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True).stdout.strip()

    return {"repo": str(repo), "commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def machine() -> dict:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def read_split(features: str, split: str, columns: list[str] | None = None) -> pd.DataFrame:
    with tempfile.TemporaryDirectory(prefix="rossmann-robust-") as local:
        folder = storage.download_dir(storage.join(storage.committed_uri(features), split), local)
        return pd.read_parquet(folder, columns=columns)


def lightgbm_forecast(features: str, spec: ModuleType) -> tuple[pd.DataFrame, dict]:
    """(Id, Sales) of LightGBM on the prepared test split, and its fit summary; trained on the prepared train split's
    features -> log(Sales), early stopping on the validation split."""
    import lightgbm as lgb

    test = read_split(features, TEST_DIR)
    # The checkout's spec, as far as its prepare wrote it (an older checkout may write fewer columns).
    columns = [col for col in spec.FEATURE_COLS if col in test.columns]
    categorical = [col for col in spec.CATEGORICAL_COLS if col in columns]
    train, validation = (read_split(features, split, [*columns, spec.LABEL_COL])
                         for split in (TRAIN_DIR, VALIDATION_DIR))
    started = time.perf_counter()
    data = lgb.Dataset(train[columns], train[spec.LABEL_COL], categorical_feature=categorical)
    valid = lgb.Dataset(validation[columns], validation[spec.LABEL_COL], reference=data)
    booster = lgb.train(LGBM_PARAMS, data, LGBM_ROUNDS, valid_sets=[valid],
                        callbacks=[lgb.early_stopping(LGBM_EARLY_STOP, verbose=False)])
    fit_s = time.perf_counter() - started
    sales = np.exp(booster.predict(test[columns], num_iteration=booster.best_iteration))
    # Like predict: a closed day (Open == 0) forecasts 0; a blank Open is treated as open.
    sales = np.where(test["Open"].eq(0).fillna(False).to_numpy(bool), 0.0, sales)
    valid_pred = np.exp(booster.predict(validation[columns], num_iteration=booster.best_iteration))
    return (pd.DataFrame({"Id": test["Id"].astype(int), "Sales": sales}),
            {"fit_s": round(fit_s, 1), "best_iteration": booster.best_iteration, "features": len(columns),
             "val_exp_rmspe": exp_rmspe(np.exp(validation[spec.LABEL_COL].to_numpy(float)), valid_pred)})


def product_forecasts(predictions: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(Id, Sales) of submission.csv and (Id, baseline) of the predictions Parquet, as score_predictions reads them."""
    attempt = storage.committed_uri(predictions)
    submission = pd.read_csv(io.BytesIO(storage.read_bytes(storage.join(attempt, SUBMISSION_FILE))),
                             usecols=["Id", "Sales"])
    rows = read_split(predictions, PREDICTIONS_DIR)
    rows = rows[rows["split"] == "test"] if "split" in rows else rows
    return submission, rows[["Id", BASELINE_COL]].dropna(subset=["Id"]).astype({"Id": int})


def quantile_forecasts(predictions: str) -> tuple[list[float], dict[str, pd.DataFrame]] | None:
    """(levels, {"model": Id + P columns of forecast_quantiles.csv, "naive": Id + the baseline's quantile columns of
    the predictions}); None for a checkout whose predict writes no quantiles."""
    attempt = storage.committed_uri(predictions)
    uri = storage.join(attempt, QUANTILES_FILE)
    if not storage.exists(uri):
        return None
    model = pd.read_csv(io.BytesIO(storage.read_bytes(uri))).drop(columns=["Date", "Store"])
    levels = [float(name[1:]) / 100 for name in model.columns[1:]]
    rows = read_split(predictions, PREDICTIONS_DIR)
    rows = rows[rows["split"] == "test"] if "split" in rows else rows
    naive = rows[["Id", *(f"{BASELINE_COL}{name}" for name in model.columns[1:])]].dropna(subset=["Id"])
    return levels, {"model": model, "naive": naive.astype({"Id": int})}


def median_bias(truth: pd.DataFrame, plan: pd.DataFrame, as_of: dt.date,
                forecasts: dict[str, pd.Series]) -> dict:
    """Median of forecast / point-in-time expected sales over the scored rows (Sales > 0); per lead week (1..7)
    for the model: a level error shows as a bias away from 1 that a symmetric error score can hide."""
    rows = plan.assign(Date=pd.to_datetime(plan["Date"])).merge(truth, on=["Store", "Date"], validate="one_to_one")
    for name, frame in forecasts.items():
        rows[name] = rows[["Id"]].merge(frame.set_axis(["Id", name], axis=1), on="Id", how="left")[name].to_numpy()
    rows = rows[rows["Sales"] > 0]
    ratios = {name: rows[name] / rows["PointInTimeExpectedSales"] for name in forecasts}
    week = ((rows["Date"] - pd.Timestamp(as_of)).dt.days - 1) // 7 + 1
    return {"median": {name: float(ratio.median()) for name, ratio in ratios.items()},
            "model_by_lead_week": {int(w): float(r.median()) for w, r in ratios["model"].groupby(week)}}


def run_cell(scenario: str, stores: int, args: argparse.Namespace, repo: Path, spec: ModuleType) -> dict:
    """One (scenario, stores): data, drop, the three jobs, LightGBM and the scores."""
    work = Path(args.workdir) / f"{scenario}-{stores}"
    (work / args.label).mkdir(parents=True, exist_ok=True)
    config = scenario_config(scenario, stores, args.seed)
    log(f"{scenario}, {stores} stores: generate and land the drop for {args.as_of}")
    dataset = generate(str(work / "full"), config)
    drops = str(work / "drops")
    land(drops, args.as_of, args.as_of, config)
    drop, features = storage.join(drops, args.as_of.isoformat()), str(work / args.label / "features")
    with jobs_from(repo):
        prepare_s = truth_bench.spark_submit("prepare", ["--raw", drop, "--out", features, "--as-of",
                                                         args.as_of.isoformat()],
                                             features, work / args.label / "prepare.log")
        run = train_and_predict(work / args.label, "run", drop, features,
                                ["--num-proc", "2", *shlex.split(args.train_args)])
    metrics = json.loads(Path(storage.committed_uri(str(truth_bench.run_dir(work / args.label, "run") / "model")),
                              "metrics.json").read_text())
    if args.no_lightgbm:   # the reference is the slowest step on 2 shared cores; scored as missing without it
        lgbm, lgbm_fit = None, {"fit_s": None}
    else:
        log(f"{scenario}, {stores} stores: LightGBM on the prepared features")
        lgbm, lgbm_fit = lightgbm_forecast(features, spec)

    truth = horizon_truth(dataset, args.as_of)
    plan = pd.read_csv(io.BytesIO(storage.read_bytes(storage.join(drop, "test.csv"))), usecols=["Id", "Store", "Date"])
    submission, baseline = product_forecasts(run["predictions"])
    scores = score_forecast(truth, plan, submission, baseline)
    scores["LightGBM"] = float("nan") if lgbm is None else score_forecast(truth, plan, lgbm)["model"]
    bias = median_bias(truth, plan, args.as_of, {"model": submission, "naive": baseline,
                                                 **({} if lgbm is None else {"LightGBM": lgbm})})
    quantiles = quantile_forecasts(run["predictions"])
    quantile_scores = (score_quantiles(truth, plan, args.as_of, config.sigma, *quantiles)
                       if quantiles else None)
    return {"scenario": scenario, "stores": stores, "as_of": args.as_of.isoformat(), "seed": args.seed,
            "description": SCENARIOS[scenario].description, "config": dataclasses.asdict(config),
            "scored_rows": scores["rows"],
            "point_in_time_floor": scores["point_in_time_floor"], "noise_floor": scores["noise_floor"],
            "exp_rmspe": {"model": scores["model"], "naive": scores["baseline"], "LightGBM": scores["LightGBM"]},
            "median_bias": bias["median"], "model_bias_by_lead_week": bias["model_by_lead_week"],
            "quantiles": quantile_scores,
            "val_exp_rmspe": metrics.get("best_val_exp_rmspe"), "gate_scores": metrics.get("gate_scores"),
            "lightgbm": lgbm_fit, "train_args": ["--num-proc", "2", *shlex.split(args.train_args)],
            "timings_s": {"prepare": round(prepare_s, 1), **run["timings_s"], "lightgbm_fit": lgbm_fit["fit_s"]},
            "epochs_run": run.get("epochs_run"), "best_epoch": run.get("best_epoch"),
            "benchmarked": git_state(repo), "machine": machine(),
            "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat()}


def ordered(results: dict) -> list[dict]:
    return sorted(results.values(), key=lambda r: (r["stores"], r["scenario"]))


def print_table(results: dict) -> None:
    print("\n| scenario | stores | model | x PIT floor | naive | model vs naive (%) | LightGBM | median bias model "
          "| median bias LightGBM | val | train s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in ordered(results):
        e, pit = r["exp_rmspe"], r["point_in_time_floor"]
        val = r.get("val_exp_rmspe")
        print(f"| {r['scenario']} | {r['stores']} | {e['model']:.4f} | {e['model'] / pit:.3f} | {e['naive']:.4f} | "
              f"{100 * (e['model'] / e['naive'] - 1):+.1f} | {e['LightGBM']:.4f} | {r['median_bias']['model']:.3f} | "
              f"{r['median_bias'].get('LightGBM', float('nan')):.3f} | {'' if val is None else f'{val:.4f}'} | "
              f"{r['timings_s']['train']:.0f} |")
    print("\n| scenario | stores | PIT floor | LightGBM x floor | model median bias by lead week 1..7 |")
    print("|---|---:|---:|---:|---|")
    for r in ordered(results):
        weeks = " ".join(f"{value:.3f}" for _, value in sorted(r["model_bias_by_lead_week"].items(),
                                                                key=lambda kv: int(kv[0])))
        print(f"| {r['scenario']} | {r['stores']} | {r['point_in_time_floor']:.4f} | "
              f"{r['exp_rmspe']['LightGBM'] / r['point_in_time_floor']:.3f} | {weeks} |")
    quantiled = [r for r in ordered(results) if r.get("quantiles")]
    if quantiled:
        print("\n| scenario | stores | as-of | nominal | coverage model | model by lead week 1..7 | coverage naive | "
              "coverage exact | coverage exact at D | wQL model | wQL naive | model vs naive (%) | wQL exact | "
              "wQL exact at D |")
        print("|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in quantiled:
        q = r["quantiles"]
        weeks = " ".join(f"{value['coverage']:.3f}" for _, value in sorted(q["model"]["by_lead_week"].items(),
                                                                          key=lambda kv: int(kv[0])))
        at_d = q.get("exact_point_in_time", {})   # not in results recorded before it was scored
        print(f"| {r['scenario']} | {r['stores']} | {r['as_of']} | {q['nominal_coverage']:.2f} | "
              f"{q['model']['coverage']:.3f} | {weeks} | {q['naive']['coverage']:.3f} | {q['exact']['coverage']:.3f} | "
              f"{at_d.get('coverage', float('nan')):.3f} | {q['model']['quantile_loss']:.4f} | "
              f"{q['naive']['quantile_loss']:.4f} | "
              f"{100 * (q['model']['quantile_loss'] / q['naive']['quantile_loss'] - 1):+.1f} | "
              f"{q['exact']['quantile_loss']:.4f} | {at_d.get('quantile_loss', float('nan')):.4f} |")


def plot(results: dict, label: str, path: Path, compare: tuple[str, dict] | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    stores = sorted({r["stores"] for r in results.values()})
    figure, axes = plt.subplots(1, len(stores), figsize=(max(6.0, 3.2 * len(stores) + 2.5 * len(results) / 2), 4.8),
                                squeeze=False)
    for ax, count in zip(axes[0], stores):
        cells = [r for r in ordered(results) if r["stores"] == count]
        series = [(f"model ({label})" if compare else "model", [r["exp_rmspe"]["model"] / r["point_in_time_floor"]
                                                                for r in cells])]
        if compare:
            # The other label's model on the same cell; missing cells stay empty.
            other = {(r["scenario"], r["stores"]): r for r in compare[1].values()}
            series.append((f"model ({compare[0]})",
                           [other[(r["scenario"], count)]["exp_rmspe"]["model"] / other[(r["scenario"], count)]
                            ["point_in_time_floor"] if (r["scenario"], count) in other else np.nan for r in cells]))
        series += [(name, [r["exp_rmspe"][name] / r["point_in_time_floor"] for r in cells]) for name in FORECASTS[1:]]
        width = 0.8 / len(series)
        x = np.arange(len(cells))
        for i, (name, values) in enumerate(series):
            ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=name)
        for bar, style in zip(QUALITY_BARS, (":", "--")):
            ax.axhline(bar, color="dimgray", linestyle=style, linewidth=1, label=f"{bar:.2f} x floor")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(x, [r["scenario"] for r in cells], rotation=30, ha="right")
        values = [v for _, values in series for v in values]
        ax.set_ylim(min(0.9, np.nanmin(values) * 0.95), np.nanmax([*values, QUALITY_BARS[-1]]) * 1.05)
        ax.set_ylabel("test exp-RMSPE / point-in-time floor")
        ax.set_title(f"{count} stores")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.suptitle(f"forecast robustness across generator scenarios ({label})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="baseline", help=f"comma-separated, of {', '.join(SCENARIOS)}")
    parser.add_argument("--stores", default="150", help="comma-separated store counts")
    parser.add_argument("--as-of", type=dt.date.fromisoformat, default=dt.date(2015, 7, 31))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", default=None, help="reused: committed job outputs are not run again")
    parser.add_argument("--label", default="after", help="names the JSON/PNG and the job outputs in the work dir")
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout whose jobs run (default: this one)")
    parser.add_argument("--train-args", default="", help="extra train arguments, e.g. \"--epochs 20\"")
    parser.add_argument("--no-lightgbm", action="store_true", help="skip the LightGBM reference (scored as nan)")
    parser.add_argument("--compare", help="label of another robustness JSON to draw beside this one's model")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args()

    repo = args.repo.resolve()
    unknown = [s for s in args.scenarios.split(",") if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}: {', '.join(SCENARIOS)}")
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="rossmann-bench-robust-")
    spec = load_spec(repo)
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out / f"robustness_{args.label}.json", args.out / f"robustness_{args.label}.png"
    record = json.loads(json_path.read_text()) if json_path.exists() else {"benchmark": "robustness",
                                                                            "label": args.label, "results": {}}
    for stores in (int(s) for s in args.stores.split(",")):
        for scenario in args.scenarios.split(","):
            cell = run_cell(scenario, stores, args, repo, spec)
            record["results"][f"{scenario}/{stores}"] = cell
            record["updated_at"] = cell["recorded_at"]
            json_path.write_text(json.dumps(record, indent=2, default=str))   # after each cell: runs take long
            log(f"{scenario}, {stores} stores: model {cell['exp_rmspe']['model']:.4f}, floor "
                f"{cell['point_in_time_floor']:.4f}")
    compare = None
    if args.compare:
        compare = (args.compare,
                   json.loads((args.out / f"robustness_{args.compare}.json").read_text())["results"])
    plot(record["results"], args.label, png_path, compare)
    print_table(record["results"])
    state = git_state(repo)
    print(f"\nbenchmarked {state['repo']} at {state['commit'][:12]}{' (dirty)' if state['dirty'] else ''}; "
          f"JSON: {json_path}; plot: {png_path}; work dir: {args.workdir}")


if __name__ == "__main__":
    main()
