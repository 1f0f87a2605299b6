"""Forecast quality against the generator's truth: training settings, warm start and point-in-time modes, scored.

For one as-of date D (default 2015-07-31, whose horizon is the Kaggle test period) and N generated stores, runs the
real jobs with spark-submit (local[2], like the DAG) and scores each submission.csv against the truth of the
horizon (exp-RMSPE over Sales > 0):
  variants   strict: the realistic drop for D (weather and trend only up to D) and prepare --point-in-time strict
             (the product's default); reference: the full snapshot and --point-in-time reference (Horovod's joins)
  configs    default: the product's training defaults (TrainParams, the DAG's params); reference: Horovod's
             keras_spark_rossmann settings (HOROVOD_REFERENCE below) for --reference-epochs; custom: the defaults
             with --epochs/--batch-size/--learning-rate/--hidden-units/--lr-schedule/--warmup-epochs
  warm start --warm-start-from D0: train `default` cold on the strict drop of D0 (yesterday's champion), then
             fine-tune it on D's features for --warm-epochs (config `warm`), beside `default` cold on D
Beside them: the noise floor (the noise-free expected sales), the point-in-time floor (expected sales with the
weather and trend after D replaced by what is known on D, synth/point_in_time_floor.py) and the naive seasonal baseline
that predict writes next to every forecast. Records each job's wall time and each model's epoch curve. Writes
bench/out/forecast_truth_<N>.json and .png (val curves against training time; test scores against the floors) and
prints a table. A --workdir is reused: committed steps are not run again.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/bench_forecast_truth.py --stores 30 \
        [--configs default,reference] [--warm-start-from 2015-07-30] [--workdir DIR]
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

from rossmann_jobs import storage
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.model.trust import STORAGE_ROOT_ENV
from rossmann_jobs.synth.cli import generate, land
from rossmann_jobs.synth.dataset import SynthConfig
from rossmann_jobs.synth.truth_scores import horizon_truth, score_forecast, score_predictions

REPO = Path(__file__).resolve().parents[1]

QUALITY_BAR = 1.10   # the forecast within 10 % of the point-in-time floor
# --configs reference: Horovod's examples/spark/keras/keras_spark_rossmann_run.py, 2.7 M parameters, batch 100, lr
# 1e-4 per rank, warm-up over 5 epochs, ReduceLROnPlateau and EarlyStopping, 100 epochs (--reference-epochs).
HOROVOD_REFERENCE = TrainParams(epochs=100, batch_size=100, learning_rate=1e-4, hidden_units=(1000, 1000, 1000, 500),
                                warmup_epochs=5, lr_schedule="plateau")


def spark_submit(job: str, args: list[str], out: str, log_path: Path, driver_memory: str = "2g",
                 inputs: tuple[str, ...] = ()) -> float:
    """Runs one job like the DAG does (spark-submit, local[2]); returns its wall time in seconds. A committed `out`
    from an earlier run of the same work dir with the same arguments and inputs (committed attempts) is reused with
    the wall time recorded then."""
    timing = Path(f"{out}.timing.json")
    key = [*args, *(storage.committed_uri(uri) for uri in inputs)]
    if (storage.exists(storage.join(out, storage.MANIFEST_NAME)) and timing.exists()
            and json.loads(timing.read_text()).get("args") == key):
        return json.loads(timing.read_text())["seconds"]
    storage.delete_prefix(out)   # another run's output (other arguments), or an uncommitted one
    jobs_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{jobs_bin}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO)}
    command = [str(jobs_bin / "spark-submit"), "--master", "local[2]", "--driver-memory", driver_memory,
               "--conf", "spark.ui.enabled=false", str(REPO / "rossmann_jobs" / f"{job}.py"), *args]
    print(f"{dt.datetime.now():%H:%M:%S} {job}: {' '.join(args)}", flush=True)
    started = time.perf_counter()
    with open(log_path, "w") as log:
        # From the checkout's folder: Horovod starts its ranks in the working directory with an environment of their
        # own (no PYTHONPATH), so a rank imports rossmann_jobs from there (a --repo of bench_robustness.py included).
        code = subprocess.run(command, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        sys.exit(f"{job} failed (exit {code}); log: {log_path}\n{log_path.read_text()[-3000:]}")
    seconds = time.perf_counter() - started
    timing.write_text(json.dumps({"seconds": seconds, "args": key}))
    return seconds


def settings_of(params: TrainParams) -> dict:
    return {"epochs": params.epochs, "batch_size": params.batch_size, "learning_rate": params.learning_rate,
            "hidden_units": ",".join(map(str, params.hidden_units)), "lr_schedule": params.lr_schedule,
            "warmup_epochs": params.warmup_epochs}


def train_args(config: str, args: argparse.Namespace) -> list[str]:
    settings = settings_of(TrainParams())
    if config == "reference":
        settings = {**settings_of(HOROVOD_REFERENCE), "epochs": args.reference_epochs}
    elif config == "custom":
        settings.update({key: getattr(args, key) for key in settings if getattr(args, key, None) is not None})
    elif config != "default":
        raise SystemExit(f"unknown config {config!r}: default, reference, custom")
    return ["--num-proc", str(args.num_proc), *[item for key, value in settings.items()
                                                  for item in (f"--{key.replace('_', '-')}", str(value))]]


def run_dir(work: Path, name: str) -> Path:
    """A run's folder: under `work`'s runs/, since the jobs load models only from their storage root's runs/ and
    models/ (rossmann_jobs/model/trust.py; train_and_predict makes `work` that root)."""
    return work / "runs" / name


def train_and_predict(work: Path, name: str, raw: str, features: str, args: list[str]) -> dict:
    out = run_dir(work, name)
    out.mkdir(parents=True, exist_ok=True)
    os.environ[STORAGE_ROOT_ENV] = str(work)   # inherited by the spark-submits below
    model, predictions = str(out / "model"), str(out / "predictions")
    timings = {"train": spark_submit("train", ["--features", features, "--out", model, *args], model,
                                     out / "train.log", inputs=(features,)),
               "predict": spark_submit("predict", ["--model", model, "--features", features, "--raw", raw,
                                                   "--out", predictions], predictions, out / "predict.log",
                                       inputs=(model, features))}
    metrics = json.loads(Path(storage.committed_uri(model), "metrics.json").read_text())
    return {"predictions": predictions,
            "timings_s": {**{k: round(v, 1) for k, v in timings.items()},
                          "horovod_training": round(metrics["timings_seconds"]["horovod training"], 1)},
            "val_exp_rmspe": metrics["best_val_exp_rmspe"], "best_epoch": metrics["best_epoch"],
            "epochs_run": metrics["epochs_run"], "warm_start": metrics.get("warm_start", {}).get("used", False),
            "params": {k: metrics["params"][k] for k in ("hidden_units", "batch_size", "learning_rate", "epochs",
                                                         "lr_schedule")},
            "curve": [{"epoch": e["epoch"], "val_exp_rmspe": e["val_exp_rmspe"], "epoch_seconds": e["epoch_seconds"]}
                      for e in metrics["epochs"]]}


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    results, floors = record["results"], record["floors"]
    figure, (curves, bars) = plt.subplots(1, 2, figsize=(13, 4.8))
    for name, values in results.items():
        if "curve" not in values:
            continue
        seconds = np.cumsum([e["epoch_seconds"] for e in values["curve"]]) / 60
        curves.plot(seconds, [e["val_exp_rmspe"] for e in values["curve"]], marker=".", label=name)
    curves.axhline(floors["validation noise floor"], color="black", linestyle=":", label="validation noise floor")
    curves.set_xlabel("training time (min, epochs summed)")
    curves.set_ylabel("validation exp-RMSPE")
    curves.set_yscale("log")
    curves.set_title("validation exp-RMSPE per epoch")
    curves.grid(alpha=0.3, which="both")
    curves.legend(fontsize=8)
    names = list(results)
    bars.barh(names, [results[n]["exp_rmspe"] for n in names], color="tab:blue")
    pit = floors["point-in-time floor"]
    bars.axvline(floors["noise floor"], color="black", linestyle=":", label="noise floor")
    bars.axvline(pit, color="tab:green", linestyle="--", label="point-in-time floor")
    bars.axvline(pit * QUALITY_BAR, color="tab:red", linestyle="--", label=f"{QUALITY_BAR:.2f} x point-in-time floor")
    bars.set_xlim(floors["noise floor"] * 0.9, max(results[n]["exp_rmspe"] for n in names) * 1.05)
    bars.set_xlabel("test exp-RMSPE against the truth (48-day horizon)")
    bars.set_title(f"{record['args']['stores']} stores, as of {record['args']['as_of']}")
    bars.invert_yaxis()
    bars.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--as-of", type=dt.date.fromisoformat, default=dt.date(2015, 7, 31))
    parser.add_argument("--variants", default="strict", help="strict,reference")
    parser.add_argument("--configs", default="default", help="default,reference,custom")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--hidden-units")
    parser.add_argument("--lr-schedule")
    parser.add_argument("--warmup-epochs", type=int)
    parser.add_argument("--reference-epochs", type=int, default=100)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--warm-start-from", type=dt.date.fromisoformat,
                        help="as-of date of the model to warm-start from (trained cold with `default` first)")
    parser.add_argument("--warm-epochs", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=str(REPO / "bench" / "out"))
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="rossmann-bench-truth-"))
    work.mkdir(parents=True, exist_ok=True)
    config = SynthConfig(stores=args.stores, seed=args.seed)
    full, drops = str(work / "full"), str(work / "drops")
    dataset = generate(full, config)
    days = [args.as_of] + ([args.warm_start_from] if args.warm_start_from else [])
    for day in days:
        land(drops, day, day, config)
    drop = storage.join(drops, args.as_of.isoformat())
    truth = horizon_truth(dataset, args.as_of)

    def plan(raw: str) -> pd.DataFrame:
        return pd.read_csv(storage.join(raw, "test.csv"), usecols=["Id", "Store", "Date"])

    # The floors over the realistic drop's plan (its rows with Sales > 0).
    oracle = score_forecast(truth, plan(drop))
    floors = {"noise floor": oracle["noise_floor"], "point-in-time floor": oracle["point_in_time_floor"],
              "validation noise floor": dataset.truth["noise_floor"]["validation"]["exp_rmspe"]}

    sources = {"strict": (drop, "strict"), "reference": (full, "reference")}
    prepared: dict[str, str] = {}
    prepare_s: dict[str, float] = {}

    def prepare(variant: str, day: dt.date) -> str:
        raw, mode = sources[variant] if day == args.as_of else (storage.join(drops, day.isoformat()), "strict")
        key = f"{variant}-{day}"
        if key not in prepared:
            features = str(work / f"features-{key}")
            prepare_s[key] = round(spark_submit("prepare", ["--raw", raw, "--out", features, "--as-of",
                                                            day.isoformat(), "--point-in-time", mode],
                                                features, work / f"prepare-{key}.log"), 1)
            prepared[key] = features
        return prepared[key]

    results: dict[str, dict] = {}
    for variant in args.variants.split(","):
        features = prepare(variant, args.as_of)
        plan_of = sources[variant][0]
        names = args.configs.split(",")
        for name in names:
            run = train_and_predict(work, f"{variant}-{name}", plan_of, features, train_args(name, args))
            if name == "default" and args.warm_start_from and variant == "strict":
                earlier = prepare("strict", args.warm_start_from)
                earlier_drop = storage.join(drops, args.warm_start_from.isoformat())
                seed_run = train_and_predict(work, f"cold-{args.warm_start_from}", earlier_drop, earlier,
                                             train_args("default", args))
                warm = train_and_predict(work, f"{variant}-warm", plan_of, features,
                                         [*train_args("default", args), "--warm-start-epochs", str(args.warm_epochs),
                                          "--warm-start-model",
                                          str(run_dir(work, f"cold-{args.warm_start_from}") / "model")])
                warm["warm_source_timings_s"] = seed_run["timings_s"]
                runs = [(name, run), ("warm", warm)]
            else:
                runs = [(name, run)]
            for label, one in runs:
                # Each variant's submission matches the truth through its own test.csv Ids.
                scored = score_predictions(dataset, args.as_of, plan_of, one["predictions"])
                results[f"{label}, {variant}"] = {"exp_rmspe": scored["model"], "rows": scored["rows"], **one}
                results.setdefault(f"naive baseline, {variant}", {"exp_rmspe": scored["baseline"]})

    record = {"benchmark": "forecast_truth", "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform(), "load_average": os.getloadavg()},
              "args": {k: str(v) if isinstance(v, dt.date) else v for k, v in vars(args).items()},
              "horizon_rows": int(len(plan(drop))), "floors": floors, "prepare_s": prepare_s, "results": results}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / f"forecast_truth_{args.stores}.json", out / f"forecast_truth_{args.stores}.png"
    json_path.write_text(json.dumps(record, indent=2, default=str))
    plot(record, png_path)

    pit = floors["point-in-time floor"]
    print(f"\n{args.stores} stores, as-of {args.as_of}, horizon {record['horizon_rows']} rows; noise floor "
          f"{floors['noise floor']:.4f}, point-in-time floor {pit:.4f}; prepare s {prepare_s}\n")
    print("| forecast | settings | test exp-RMSPE vs truth | x point-in-time floor | val exp-RMSPE | best epoch / run "
          "| train s (Horovod s) | predict s |")
    print("|---|---|---:|---:|---:|---|---:|---:|")
    for name, values in results.items():
        t, p = values.get("timings_s", {}), values.get("params")
        settings = (f"{p['hidden_units']}, batch {p['batch_size']}, lr {p['learning_rate']:g}, {p['lr_schedule']}, "
                    f"{p['epochs']} ep"
                    + (", warm" if values.get("warm_start") else "")) if p else ""
        val = values.get("val_exp_rmspe")
        epochs = f"{values['best_epoch']} / {values['epochs_run']}" if "epochs_run" in values else ""
        train = f"{t['train']} ({t['horovod_training']})" if t else ""
        print(f"| {name} | {settings} | {values['exp_rmspe']:.4f} | {values['exp_rmspe'] / pit:.2f} | "
              f"{'' if val is None else f'{val:.4f}'} | {epochs} | {train} | {t.get('predict', '')} |")
    print(f"\nJSON: {json_path}; plot: {png_path}; work dir: {work}")


if __name__ == "__main__":
    main()
