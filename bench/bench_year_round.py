"""The published forecast at origins across the whole year: the gate's season backtest and the naive fallback included.

For each generator draw (--seeds) and origin (--origins: by default the end of every month from 2014-08 to 2015-07,
the twelve origins a history from 2013-01-01 allows a year-earlier replay at), runs a bench_robustness cell (the
real prepare, train and predict jobs on a realistic drop, LightGBM on the same features, the truth's scores), then
what the DAG adds before publishing: the season backtest (train.py --season-backtest, the same training arguments)
and the quality gate's rule (plugins/rossmann/gate.py decide_promotion, no champion: a cell is one day's first
run). Where the gate refuses the network, the predict job's naive fallback (--model "") is run and scored as the
published forecast. Every forecast is scored against the generator's truth: exp-RMSPE over the point-in-time floor,
vs the naive median and LightGBM, the median bias, the P10-P90 coverage; and the season backtest's cost.
Writes bench/out/year_round_<label>.json, draws bench/out/year_round_<label>.png and prints a markdown table.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=.:plugins .venvs/jobs/bin/python bench/bench_year_round.py \
        [--seeds 29,31] [--origins 2014-10-31,2014-11-30] [--stores 150] [--scenario baseline] [--workdir DIR] \
        [--label L] [--no-lightgbm]

Four origins at 1,115 stores, one per season: `--stores 1115 --origins 2014-10-31,2015-01-31,2015-04-30,2015-07-31`.
A --workdir is reused: committed job outputs with the same arguments are not run again.
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import shlex
from pathlib import Path

import bench_forecast_truth as truth_bench  # bench/, this script's folder
import bench_robustness as robustness
import numpy as np
import pandas as pd
from bench_forecast_truth import REPO

from rossmann.gate import decide_promotion
from rossmann_jobs import storage
from rossmann_jobs.synth.cli import generate
from rossmann_jobs.synth.scenarios import scenario_config
from rossmann_jobs.synth.truth_scores import horizon_truth, score_forecast, score_quantiles
from rossmann_jobs.training.season_backtest import DEFAULT_MIN_TRAIN_DAYS

DEFAULT_ORIGINS = ("2014-08-31", "2014-09-30", "2014-10-31", "2014-11-30", "2014-12-31", "2015-01-31",
                   "2015-02-28", "2015-03-31", "2015-04-30", "2015-05-31", "2015-06-30", "2015-07-31")


def committed_summary(out: str) -> dict:
    return storage.read_manifest(out).get("summary") or {}


def season_backtest(work: Path, features: str, train_args: list[str], min_train_days: int) -> tuple[dict, float]:
    """The season backtest of the cell's features (skipped when committed with the same arguments)."""
    out = str(truth_bench.run_dir(work, "season_backtest"))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    # The minimum history named, so that a committed backtest of another default is not reused.
    seconds = truth_bench.spark_submit("train", ["--features", features, "--out", out, "--season-backtest",
                                                 "--backtest-min-train-days", str(min_train_days),
                                                 *train_args], out, Path(f"{out}.log"), inputs=(features,))
    return committed_summary(out)["season_backtest"], seconds


def naive_fallback(work: Path, features: str, drop: str) -> tuple[str, float]:
    """The predict job's naive seasonal fallback (--model "") of the cell: what the DAG publishes when the gate
    refuses the network."""
    out = str(truth_bench.run_dir(work, "naive_fallback"))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    seconds = truth_bench.spark_submit("predict", ["--model", "", "--features", features, "--raw", drop, "--out", out],
                                       out, Path(f"{out}.log"), inputs=(features,))
    return out, seconds


def run_origin(seed: int, origin: dt.date, stores: int, args: argparse.Namespace, spec) -> dict:
    cell_args = argparse.Namespace(workdir=str(Path(args.workdir) / f"seed{seed}-{origin}"), label=args.label,
                                   seed=seed, as_of=origin, train_args=args.train_args, no_lightgbm=args.no_lightgbm)
    cell = robustness.run_cell(args.scenario, stores, cell_args, REPO, spec)
    work = Path(cell_args.workdir) / f"{args.scenario}-{stores}" / args.label
    features, drop = str(work / "features"), str(Path(cell_args.workdir) / f"{args.scenario}-{stores}" / "drops" /
                                                  origin.isoformat())
    train_args = ["--num-proc", "2", *shlex.split(args.train_args)]
    robustness.log(f"seed {seed}, {origin}, {stores} stores: the season backtest")
    season, backtest_s = season_backtest(work, features, train_args, args.backtest_min_train_days)
    decision = decide_promotion(cell["gate_scores"], None, 0.0, season=season)
    published = "model"
    if not decision["promoted"]:   # no champion in a cell: the gate's fallback forecasts
        robustness.log(f"seed {seed}, {origin}: not promoted ({decision['reason']}): the naive fallback")
        fallback, fallback_s = naive_fallback(work, features, drop)
        published = "fallback"
        config = scenario_config(args.scenario, stores, seed)
        dataset = generate(str(Path(cell_args.workdir) / f"{args.scenario}-{stores}" / "full"), config)
        truth = horizon_truth(dataset, origin)
        plan = pd.read_csv(io.BytesIO(storage.read_bytes(storage.join(drop, "test.csv"))),
                           usecols=["Id", "Store", "Date"])
        submission, _baseline = robustness.product_forecasts(fallback)
        cell["exp_rmspe"]["fallback"] = score_forecast(truth, plan, submission)["model"]
        cell["median_bias"]["fallback"] = robustness.median_bias(truth, plan, origin, {"model": submission})[
            "median"]["model"]
        cell["quantiles_fallback"] = score_quantiles(truth, plan, origin, config.sigma,
                                                     *robustness.quantile_forecasts(fallback))["model"]
        cell["timings_s"]["naive_fallback_predict"] = round(fallback_s, 1)
    cell.update(season_backtest=season, gate=decision, published=published)
    cell["timings_s"]["season_backtest"] = round(backtest_s, 1)
    return cell


def published_scores(cell: dict) -> tuple[float, float, float | None]:
    """(exp-RMSPE, median bias, P10-P90 coverage) of what the DAG would publish for the cell."""
    if cell["published"] == "fallback":
        return (cell["exp_rmspe"]["fallback"], cell["median_bias"]["fallback"],
                cell["quantiles_fallback"]["coverage"])
    quantiles = cell.get("quantiles") or {}
    return (cell["exp_rmspe"]["model"], cell["median_bias"]["model"],
            (quantiles.get("model") or {}).get("coverage"))


def print_table(cells: list[dict]) -> None:
    print("\n| seed | stores | origin | published | x PIT floor | vs naive (%) | network x floor | network vs naive "
          "(%) | vs LightGBM (%) | median bias published | P10-P90 coverage | backtest network / naive | "
          "backtest s |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for c in cells:
        e, floor = c["exp_rmspe"], c["point_in_time_floor"]
        score, bias, coverage = published_scores(c)
        season = c["season_backtest"]
        backtest = (f"{season['challenger']:.4f} / {season['baseline']:.4f}" if season.get("available")
                    else "not available")
        print(f"| {c['seed']} | {c['stores']} | {c['as_of']} | {c['published']} | {score / floor:.3f} | "
              f"{100 * (score / e['naive'] - 1):+.1f} | {e['model'] / floor:.3f} | "
              f"{100 * (e['model'] / e['naive'] - 1):+.1f} | {100 * (e['model'] / e['LightGBM'] - 1):+.1f} | "
              f"{100 * (bias - 1):+.1f} % | {'' if coverage is None else f'{100 * coverage:.1f} %'} | {backtest} | "
              f"{c['timings_s']['season_backtest']:.0f} |")


def plot(cells: list[dict], path: Path, label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    groups = sorted({(c["seed"], c["stores"]) for c in cells})
    figure, axes = plt.subplots(len(groups), 1, figsize=(11, 3.6 * len(groups)), squeeze=False)
    for ax, (seed, stores) in zip(axes[:, 0], groups):
        rows = sorted((c for c in cells if (c["seed"], c["stores"]) == (seed, stores)), key=lambda c: c["as_of"])
        x = np.arange(len(rows))
        floors = np.array([c["point_in_time_floor"] for c in rows])
        series = {"published": [published_scores(c)[0] for c in rows],
                  "network": [c["exp_rmspe"]["model"] for c in rows],
                  "naive": [c["exp_rmspe"]["naive"] for c in rows],
                  "LightGBM": [c["exp_rmspe"]["LightGBM"] for c in rows]}
        width = 0.8 / len(series)
        for i, (name, values) in enumerate(series.items()):
            ax.bar(x + (i - 1.5) * width, np.array(values) / floors, width, label=name)
        for position, c in zip(x, rows):
            if c["published"] == "fallback":
                ax.annotate("fallback", (position - 1.5 * width, published_scores(c)[0] / c["point_in_time_floor"]),
                            fontsize=7, rotation=90, va="bottom", ha="center")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(1.08, color="dimgray", linestyle="--", linewidth=1, label="1.08 x floor")
        ax.set_xticks(x, [c["as_of"] for c in rows], rotation=30, ha="right")
        ax.set_ylabel("exp-RMSPE / point-in-time floor")
        ax.set_title(f"generator seed {seed}, {stores} stores")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8, ncol=5)
    figure.suptitle(f"the published forecast across the year ({label})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="29,31", help="generator draws, comma-separated (neither used for a choice)")
    parser.add_argument("--origins", default=",".join(DEFAULT_ORIGINS), help="as-of dates, comma-separated")
    parser.add_argument("--stores", type=int, default=150)
    parser.add_argument("--scenario", default="baseline")
    parser.add_argument("--workdir", default=str(REPO / "bench" / "work" / "year_round"))
    parser.add_argument("--label", default="product")
    parser.add_argument("--train-args", default="", help="extra train arguments (the backtest gets them too)")
    parser.add_argument("--no-lightgbm", action="store_true")
    parser.add_argument("--backtest-min-train-days", type=int, default=DEFAULT_MIN_TRAIN_DAYS,
                        help="the season backtest's minimum history (train.py's option of that name)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args()
    spec = robustness.load_spec(REPO)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"year_round_{args.label}.json"
    record = json.loads(path.read_text()) if path.exists() else {"cells": {}}
    for seed in (int(s) for s in args.seeds.split(",")):
        for origin in (dt.date.fromisoformat(o) for o in args.origins.split(",")):
            cell = run_origin(seed, origin, args.stores, args, spec)
            record["cells"][f"{seed}:{args.stores}:{origin}"] = cell
            path.write_text(json.dumps(record, indent=2, default=str))   # after every cell: long runs keep what ran
            cells = sorted(record["cells"].values(), key=lambda c: (c["seed"], c["stores"], c["as_of"]))
            plot(cells, args.out / f"year_round_{args.label}.png", args.label)
    print_table(sorted(record["cells"].values(), key=lambda c: (c["seed"], c["stores"], c["as_of"])))
    print(f"\n{path}")


if __name__ == "__main__":
    main()
