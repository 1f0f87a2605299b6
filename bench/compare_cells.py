"""Two versions of the product on the same cells: exp-RMSPE, P10-P90 coverage and wQL per cell, a table and a picture.

Each pair names the "before" cell's bench_robustness.py label and the "after": another label (the product changed,
run on the same work dir's data), or `hl:<name>:<variant>`, a bench_horizon_level.py variant's retrain
(bench/out/horizon_level_<name>.json). Cells are grouped by their origin: January (2015-01-20 .. 2015-01-31), the
December horizons (2014-10-31, 2014-11-30), and the rest. Writes bench/out/compare_cells_<name>.json and .png.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/compare_cells.py --name s36 \\
        --pair g0120:c0120 --pair g0305:hl:s36-cc-g0305:christmas-clean
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from bench_quantile_origins import LEAD_WEEKS
from recorded_coverage import CHRISTMAS_ORIGINS

OUT = Path(__file__).resolve().parent / "out"
GROUPS = ("January origins", "December horizons", "other origins")


def robustness_cell(label: str) -> dict:
    record = json.loads((OUT / f"robustness_{label}.json").read_text())
    (r,) = record["results"].values()
    q = r["quantiles"]
    return {"scenario": r["scenario"], "stores": r["stores"], "as_of": r["as_of"], "seed": r.get("seed", 7),
            "exp_rmspe": r["exp_rmspe"]["model"], "naive_exp_rmspe": r["exp_rmspe"]["naive"],
            "coverage": q["model"]["coverage"],
            "coverage_by_lead_week": [q["model"]["by_lead_week"][str(w)]["coverage"] for w in LEAD_WEEKS],
            "wql_vs_naive": q["model"]["quantile_loss"] / q["naive"]["quantile_loss"] - 1, "source": label}


def variant_cell(name: str, variant: str) -> dict:
    record = json.loads((OUT / f"horizon_level_{name}.json").read_text())
    (cell,) = record["cells"].values()
    v = cell[variant]
    return {"exp_rmspe": v["exp_rmspe"], "coverage": v["coverage"], "coverage_by_lead_week": v["coverage_by_lead_week"],
            "wql_vs_naive": v["wql_vs_naive"], "source": f"horizon_level_{name} {variant}"}


def group_of(as_of: str) -> str:
    if as_of.startswith("2015-01"):
        return "January origins"
    return "December horizons" if as_of in CHRISTMAS_ORIGINS else "other origins"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    colours = {"January origins": "tab:red", "December horizons": "tab:purple", "other origins": "tab:blue"}
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6))
    for row in rows:
        before, after, colour = row["before"], row["after"], colours[row["group"]]
        marker = "s" if before["stores"] > 150 else "o"
        left.scatter(before["exp_rmspe"], after["exp_rmspe"], color=colour, marker=marker)
        right.annotate("", xy=(row["index"], 100 * after["coverage"]), xytext=(row["index"], 100 * before["coverage"]),
                       arrowprops={"arrowstyle": "->", "color": colour})
    limits = [0.09, 0.23]
    left.plot(limits, limits, color="gray", linewidth=0.8)
    left.set(xlim=limits, ylim=limits, xlabel="exp-RMSPE before", ylabel="exp-RMSPE after",
             title="point forecast against the truth (below the line: better)")
    for name, colour in colours.items():
        left.scatter([], [], color=colour, label=name)
    left.scatter([], [], color="gray", marker="s", label="1,115 stores (circles: 150)")
    left.legend(fontsize=8)
    right.axhspan(77, 83, color="tab:green", alpha=0.15, label="issue 36: 77-83 %")
    right.set(xlim=(-0.5, len(rows) - 0.5), ylim=(30, 90), ylabel="P10-P90 coverage (%)",
              title="interval coverage, before -> after")
    right.set_xticks(range(len(rows)), [r["before"]["as_of"][2:] for r in rows], rotation=60, fontsize=7)
    right.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", action="append", required=True, help="BEFORE:AFTER or BEFORE:hl:NAME:VARIANT")
    parser.add_argument("--name", default="latest")
    args = parser.parse_args()
    rows = []
    for pair in args.pair:
        before_label, *after = pair.split(":")
        before = robustness_cell(before_label)
        after_cell = variant_cell(after[1], after[2]) if after[0] == "hl" else robustness_cell(after[0])
        rows.append({"cell": f"{before['scenario']}, {before['stores']:,}, {before['as_of']}, seed {before['seed']}",
                     "group": group_of(before["as_of"]), "before": before, "after": after_cell,
                     "exp_rmspe_change": after_cell["exp_rmspe"] / before["exp_rmspe"] - 1})
    rows.sort(key=lambda r: (GROUPS.index(r["group"]), r["before"]["stores"], r["before"]["as_of"]))
    for index, row in enumerate(rows):
        row["index"] = index
    print("| cell | exp-RMSPE before -> after | change | after vs naive | coverage | after by lead week 1..7 | "
          "wQL vs naive |\n|---|---|---:|---:|---|---|---|")
    for r in rows:
        b, a = r["before"], r["after"]
        print(f"| {r['cell']} | {b['exp_rmspe']:.4f} -> {a['exp_rmspe']:.4f} | {100 * r['exp_rmspe_change']:+.1f} % | "
              f"{100 * (a['exp_rmspe'] / b['naive_exp_rmspe'] - 1):+.1f} % | {100 * b['coverage']:.1f} -> "
              f"{100 * a['coverage']:.1f} % | {' '.join(f'{100 * w:.0f}' for w in a['coverage_by_lead_week'])} | "
              f"{100 * b['wql_vs_naive']:+.1f} -> {100 * a['wql_vs_naive']:+.1f} % |")
    groups = {}
    print("\n| origins | cells | exp-RMSPE change: mean (range) | better in | coverage | wQL vs naive |"
          "\n|---|---:|---|---:|---|---|")
    for name in GROUPS:
        group = [r for r in rows if r["group"] == name]
        if not group:
            continue
        change = np.array([r["exp_rmspe_change"] for r in group])
        summary = {"cells": len(group), "exp_rmspe_change_mean": float(change.mean()),
                   "exp_rmspe_change_range": [float(change.min()), float(change.max())],
                   "better": int((change < 0).sum()),
                   **{f"{key}_{side}": float(np.mean([r[side][key] for r in group]))
                      for key in ("coverage", "wql_vs_naive") for side in ("before", "after")}}
        groups[name] = summary
        print(f"| {name} | {len(group)} | {100 * change.mean():+.1f} % ({100 * change.min():+.1f} .. "
              f"{100 * change.max():+.1f} %) | {summary['better']} of {len(group)} | "
              f"{100 * summary['coverage_before']:.1f} -> {100 * summary['coverage_after']:.1f} % | "
              f"{100 * summary['wql_vs_naive_before']:+.1f} -> {100 * summary['wql_vs_naive_after']:+.1f} % |")
    OUT.mkdir(exist_ok=True)
    (OUT / f"compare_cells_{args.name}.json").write_text(json.dumps({"rows": rows, "groups": groups}, indent=1))
    plot(rows, OUT / f"compare_cells_{args.name}.png")
    print(f"\nwrote {OUT / f'compare_cells_{args.name}.json'} and .png")


if __name__ == "__main__":
    main()
