"""Quantile forecasts over several forecast origins: coverage per lead week and quantile loss, pooled over cells.

One origin's horizon carries its own common shocks (a holiday, a weather spell, the trend's drift), so one cell's
coverage of a lead week says little about the method (bench/RESULTS.md, "Interval coverage"). This reads the JSONs that
bench_robustness.py wrote for several labels (one label per as-of date: each holds its scenarios at one store
count) and pools them per group of labels: the mean over cells of the P10-P90 coverage by lead week (with its
range), of the whole horizon's coverage, and of the weighted quantile loss against the naive baseline's quantiles
and the truth's ("exact at D": the noise around the point-in-time expectation). Writes
bench/out/quantile_origins_<name>.json and a picture of coverage by lead week per group, and prints the tables.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/bench_quantile_origins.py \\
        --group before=pre,pre0531 --group after=post,post0531 [--stores 150] [--name NAME]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TARGET_COVERAGE = (0.77, 0.83)   # the target of the 80 % interval per lead week
LEAD_WEEKS = range(1, 8)
DEFAULT_GENERATOR_SEED = 7     # bench_robustness.py --seed; older results did not record it


def cells(out: Path, labels: list[str], stores: int | None) -> list[dict]:
    """Every result with quantile scores in the labels' robustness JSONs (at one store count if given)."""
    found = []
    for label in labels:
        record = json.loads((out / f"robustness_{label}.json").read_text())
        found += [{**r, "label": label} for r in record["results"].values()
                  if r.get("quantiles") and (stores is None or r["stores"] == stores)]
    return found


def cell_summary(r: dict) -> dict:
    q = r["quantiles"]
    by_week = {int(w): v["coverage"] for w, v in q["model"]["by_lead_week"].items()}
    # The truth's own noise quantiles around the realized expectation: what a perfectly calibrated interval covers
    # in this horizon's weeks, which one draw of the noise moves by itself.
    exact_by_week = {int(w): v["coverage"] for w, v in q["exact"]["by_lead_week"].items()}
    at_d = q.get("exact_point_in_time", {})
    return {"label": r["label"], "scenario": r["scenario"], "stores": r["stores"], "as_of": r["as_of"],
            "seed": r.get("seed", DEFAULT_GENERATOR_SEED),
            "exp_rmspe_model": r["exp_rmspe"]["model"], "exp_rmspe_naive": r["exp_rmspe"]["naive"],
            "coverage": q["model"]["coverage"], "coverage_by_lead_week": by_week,
            "exact_coverage_by_lead_week": exact_by_week,
            "wql_model": q["model"]["quantile_loss"], "wql_naive": q["naive"]["quantile_loss"],
            "wql_exact_at_d": at_d.get("quantile_loss"), "coverage_naive": q["naive"]["coverage"]}


def in_target(by_weeks: list[dict[int, float]]) -> float:
    """The share of (cell, lead week) coverages within TARGET_COVERAGE."""
    values = [value for by_week in by_weeks for value in by_week.values()]
    return float(np.mean([TARGET_COVERAGE[0] <= value <= TARGET_COVERAGE[1] for value in values]))


def pooled(summaries: list[dict]) -> dict:
    """Means over the cells (each cell one origin and scenario, weighted alike)."""
    weeks = {w: [s["coverage_by_lead_week"][w] for s in summaries if w in s["coverage_by_lead_week"]]
             for w in LEAD_WEEKS}
    vs_naive = [s["wql_model"] / s["wql_naive"] - 1 for s in summaries]
    at_d = [s["wql_exact_at_d"] / s["wql_naive"] - 1 for s in summaries if s["wql_exact_at_d"] is not None]
    return {"cells": len(summaries),
            "coverage": float(np.mean([s["coverage"] for s in summaries])),
            # Each cell's own lead weeks inside TARGET_COVERAGE: the model's, and the exact interval's on the same rows.
            "weeks_in_target": in_target([s["coverage_by_lead_week"] for s in summaries]),
            "exact_weeks_in_target": in_target([s["exact_coverage_by_lead_week"] for s in summaries]),
            "coverage_by_lead_week": {w: {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v))}
                                      for w, v in weeks.items() if v},
            "wql_vs_naive": float(np.mean(vs_naive)),
            "wql_exact_at_d_vs_naive": float(np.mean(at_d)) if at_d else None,
            "exp_rmspe_vs_naive": float(np.mean([s["exp_rmspe_model"] / s["exp_rmspe_naive"] - 1
                                                 for s in summaries]))}


def print_tables(groups: dict[str, dict]) -> None:
    print("\n| group | scenario | stores | as-of | exp-RMSPE vs naive | coverage | by lead week 1..7 | exact by lead "
          "week | wQL vs naive | exact at D vs naive |")
    print("|---|---|---:|---|---:|---:|---|---|---:|---:|")
    for name, group in groups.items():
        for s in group["cells"]:
            weeks = " ".join(f"{100 * s['coverage_by_lead_week'][w]:.0f}" for w in sorted(s["coverage_by_lead_week"]))
            exact = " ".join(f"{100 * s['exact_coverage_by_lead_week'][w]:.0f}"
                             for w in sorted(s["exact_coverage_by_lead_week"]))
            at_d = "" if s["wql_exact_at_d"] is None else f"{100 * (s['wql_exact_at_d'] / s['wql_naive'] - 1):+.1f} %"
            print(f"| {name} | {s['scenario']} | {s['stores']} | {s['as_of']} | "
                  f"{100 * (s['exp_rmspe_model'] / s['exp_rmspe_naive'] - 1):+.1f} % | {100 * s['coverage']:.1f} % | "
                  f"{weeks} | {exact} | {100 * (s['wql_model'] / s['wql_naive'] - 1):+.1f} % | "
                  f"{at_d} |")
    print("\n| group | cells | exp-RMSPE vs naive | coverage | mean coverage by lead week 1..7 (min-max) | "
          "wQL vs naive | exact at D vs naive | (cell, week) in 77-83 %: model / exact |")
    print("|---|---:|---:|---:|---|---:|---:|---|")
    for name, group in groups.items():
        p = group["pooled"]
        weeks = ", ".join(f"{100 * v['mean']:.1f} ({100 * v['min']:.0f}-{100 * v['max']:.0f})"
                          for _, v in sorted(p["coverage_by_lead_week"].items()))
        at_d = p["wql_exact_at_d_vs_naive"]
        print(f"| {name} | {p['cells']} | {100 * p['exp_rmspe_vs_naive']:+.1f} % | {100 * p['coverage']:.1f} % | "
              f"{weeks} | {100 * p['wql_vs_naive']:+.1f} % | {'' if at_d is None else f'{100 * at_d:+.1f} %'} | "
              f"{100 * p['weeks_in_target']:.0f} % / {100 * p['exact_weeks_in_target']:.0f} % |")


def plot(groups: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 4.5))
    ax.axhspan(*[100 * c for c in TARGET_COVERAGE], color="tab:green", alpha=0.15, label="target: 77-83 %")
    ax.axhline(80, color="dimgray", linestyle=":", linewidth=1)
    offsets = np.linspace(-0.15, 0.15, len(groups))
    for offset, (name, group) in zip(offsets, groups.items()):
        weeks = sorted(group["pooled"]["coverage_by_lead_week"].items())
        x = np.array([w for w, _ in weeks]) + offset
        mean = np.array([100 * v["mean"] for _, v in weeks])
        low, high = mean - [100 * v["min"] for _, v in weeks], [100 * v["max"] for _, v in weeks] - mean
        ax.errorbar(x, mean, yerr=[low, high], marker="o", capsize=3,
                    label=f"{name}: mean of {group['pooled']['cells']} cells (range)")
    ax.set_xlabel("lead week")
    ax.set_ylabel("P10-P90 coverage of the actual sales (%)")
    ax.set_title("the 80 % interval by lead week, over forecast origins and scenarios")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", action="append", required=True,
                        help="NAME=LABEL,LABEL: robustness labels pooled under one name (repeat per group)")
    parser.add_argument("--stores", type=int, default=None, help="only cells of this store count")
    parser.add_argument("--name", default="latest", help="names the JSON and PNG")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args()
    groups = {}
    for spec in args.group:
        name, _, labels = spec.partition("=")
        summaries = [cell_summary(r) for r in cells(args.out, labels.split(","), args.stores)]
        if not summaries:
            raise SystemExit(f"group {name}: no result with quantile scores in robustness_{{{labels}}}.json")
        groups[name] = {"labels": labels.split(","), "cells": summaries, "pooled": pooled(summaries)}
    print_tables(groups)
    json_path, png_path = (args.out / f"quantile_origins_{args.name}.{ext}" for ext in ("json", "png"))
    json_path.write_text(json.dumps({"groups": groups, "target_coverage": TARGET_COVERAGE}, indent=2))
    plot(groups, png_path)
    print(f"\nJSON: {json_path}; plot: {png_path}")


if __name__ == "__main__":
    main()
