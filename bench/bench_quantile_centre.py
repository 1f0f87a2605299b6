"""Where the quantiles are centred: on the validation window's median residual, or on the point forecast.

Re-scores the stored predictions of every bench_robustness.py / bench_horizon_level.py cell under the given work dirs
against the truth's sales. The quantile table is each lead week's residual quantiles moved by (centre - the week's
median), so the two centrings differ by exactly the window's median residual c (the predict summary's
`median_log_residual`): P_q centred on the forecast = P_q centred on the window x exp(-c). The script reads from the
summary's `method` which one a cell was written with and derives the other, so no predict is re-run and the figures
are those the product would write on the same model. Reported per store count, over every cell outside the December
horizons and over the cells named by --current (the product's current levels): P10-P90 coverage by lead week, wQL
against the naive baseline's quantiles, and whether c foretells the horizon's median log error at all. Writes
bench/out/quantile_centre_<name>.json and .png (coverage by lead week; c against the horizon's median error).

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/bench_quantile_centre.py \\
        --workdir /work/bench-s35 --workdir /work/bench-s36 --current c0120,C0610,cc-g0305 [--name s37]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from bench_horizon_level import QUANTILE_LEVELS, interval_scores, scored_horizon
from bench_quantile_origins import LEAD_WEEKS, TARGET_COVERAGE
from recorded_coverage import CHRISTMAS_ORIGINS

OUT = Path(__file__).resolve().parent / "out"
CENTRINGS = ("window median", "point forecast")
VARIANT_DIR, VARIANT = "horizon-level", "christmas-clean"


def recorded_cells(workdir: Path, retrains: dict[str, str] | None = None) -> list[tuple[str, Path, Path]]:
    """(label, cell, run) for every run with predictions: robustness cells (<scenario-stores>/<label>) and
    bench_horizon_level's retrains of a variant, scored against the original cell's truth: retrains maps the variant
    to its labels' prefix, by default the christmas-clean retrains as cc-<label>."""
    found = []
    for run in sorted(workdir.glob("*/*/runs/run")):
        cell = run.parents[1]
        if cell.parent.name != VARIANT_DIR:
            found.append((cell.name, cell, run))
    for variant, prefix in (retrains or {VARIANT: "cc-"}).items():
        for run in sorted((workdir / VARIANT_DIR).glob(f"{variant}-*/runs/run")):
            scenario_stores, label = run.parents[1].name.removeprefix(f"{variant}-").rsplit("-", 1)
            found.append((f"{prefix}{label}", workdir / scenario_stores / label, run))
    return [(label, cell, run) for label, cell, run in found
            if (cell.parent / "drops.truth.expected.parquet").exists() and (run / "predictions" / "_SUCCESS").exists()]


def scores(rows: pd.DataFrame, shift: float) -> dict:
    """Coverage (all, by lead week) and wQL vs the naive baseline of the model's quantiles moved by exp(shift)."""
    factor = float(np.exp(shift))
    return interval_scores(rows.assign(**{f"Sales{name}": factor * rows[f"Sales{name}"] for name in QUANTILE_LEVELS}))


def cell_record(label: str, cell: Path, run: Path) -> dict:
    summary = json.loads((run / "predictions" / "_SUCCESS").read_text())["summary"]
    bias = summary["quantiles"]["median_log_residual"]
    rows = scored_horizon(cell, run)
    on_window = "window's median" in summary["quantiles"]["method"]
    to_window, to_forecast = (0.0, -bias) if on_window else (bias, 0.0)
    scenario, stores = cell.parent.name.rsplit("-", 1)
    return {"label": label, "workdir": str(cell.parents[1]), "scenario": scenario, "stores": int(stores),
            "as_of": summary["as_of"], "written_centred_on": CENTRINGS[0] if on_window else CENTRINGS[1],
            "window_median_residual": bias,
            "horizon_median_log_error": float(np.median(np.log(rows.Sales / rows.SalesForecast))),
            CENTRINGS[0]: scores(rows, to_window), CENTRINGS[1]: scores(rows, to_forecast)}


def distinct(records: list[dict]) -> list[dict]:
    """One record per cell: a variant retrain that the product later reproduced to the digit counts once (the
    robustness cell's label is kept)."""
    seen, out = set(), []
    for r in sorted(records, key=lambda r: r["label"].startswith("cc-")):
        key = (r["workdir"], r["scenario"], r["stores"], r["as_of"], round(r[CENTRINGS[0]]["coverage"], 9),
               round(r[CENTRINGS[0]]["wql_vs_naive"], 9))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def pooled(records: list[dict]) -> dict:
    out = {"cells": len(records)}
    for centring in CENTRINGS:
        by_week = np.array([r[centring]["coverage_by_lead_week"] for r in records])
        out[centring] = {"coverage": float(np.mean([r[centring]["coverage"] for r in records])),
                         "coverage_by_lead_week": [round(float(v), 4) for v in by_week.mean(axis=0)],
                         "weeks_in_target": float(np.mean((by_week >= TARGET_COVERAGE[0])
                                                          & (by_week <= TARGET_COVERAGE[1]))),
                         "wql_vs_naive": float(np.mean([r[centring]["wql_vs_naive"] for r in records])),
                         "cells_better_wql": int(sum(r[CENTRINGS[1]]["wql_vs_naive"] < r[CENTRINGS[0]]["wql_vs_naive"]
                                                     for r in records))}
    return out


def plot(pools: dict, records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    shown = [name for name in pools if pools[name]["cells"]]
    figure, axes = plt.subplots(1, len(shown) + 1, figsize=(4.2 * (len(shown) + 1), 4))
    for axis, name in zip(axes, shown):
        for centring, colour in zip(CENTRINGS, ("tab:gray", "tab:blue")):
            axis.plot(list(LEAD_WEEKS), [100 * v for v in pools[name][centring]["coverage_by_lead_week"]],
                      marker="o", color=colour, label=f"centred on the {centring}")
        axis.axhspan(100 * TARGET_COVERAGE[0], 100 * TARGET_COVERAGE[1], color="tab:green", alpha=0.15)
        axis.set(title=f"{name} ({pools[name]['cells']} cells)", xlabel="lead week", ylim=(65, 87))
        axis.legend(fontsize=7, loc="lower left")
    axes[0].set_ylabel("P10-P90 coverage (%)")
    scatter = axes[-1]
    window = [100 * r["window_median_residual"] for r in records]
    horizon = [100 * r["horizon_median_log_error"] for r in records]
    scatter.scatter(window, horizon, s=14)
    scatter.axhline(0, color="gray", linewidth=0.8)
    scatter.axvline(0, color="gray", linewidth=0.8)
    scatter.set(xlabel="validation window's median log residual (%)", ylabel="horizon's median log error (%)",
                title="does the window's bias carry over?")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", action="append", required=True, type=Path)
    parser.add_argument("--current", default="", help="labels of the cells of the product's current levels")
    parser.add_argument("--name", default="s37")
    args = parser.parse_args()
    current = set(filter(None, args.current.split(",")))
    records = distinct([cell_record(*found) for workdir in args.workdir for found in recorded_cells(workdir)])
    outside = [r for r in records if r["as_of"] not in CHRISTMAS_ORIGINS]
    pools = {f"{stores} stores{suffix}": pooled([r for r in chosen if r["stores"] == stores])
             for suffix, chosen in (("", outside), (", current levels", [r for r in outside if r["label"] in current]))
             for stores in sorted({r["stores"] for r in records})}
    window = np.array([r["window_median_residual"] for r in records])
    horizon = np.array([r["horizon_median_log_error"] for r in records])
    carry_over = {"cells": len(records), "mean_window_median_residual": float(window.mean()),
                  "mean_horizon_median_log_error": float(horizon.mean()),
                  "correlation": float(np.corrcoef(window, horizon)[0, 1]),
                  "rms_horizon_error_around_window_median": float(np.sqrt(np.mean((horizon - window) ** 2))),
                  "rms_horizon_error_around_forecast": float(np.sqrt(np.mean(horizon ** 2)))}
    print("| pool (outside December horizons) | cells | centred on | coverage | by lead week 1..7 | weeks in 77-83 % |"
          " wQL vs naive | cells with lower wQL |")
    print("|---|---:|---|---:|---|---:|---:|---:|")
    for name, pool in pools.items():
        for centring in CENTRINGS:
            p = pool.get(centring)
            if p:
                weeks = " ".join(f"{100 * v:.0f}" for v in p["coverage_by_lead_week"])
                print(f"| {name} | {pool['cells']} | {centring} | {100 * p['coverage']:.1f} % | {weeks} | "
                      f"{100 * p['weeks_in_target']:.0f} % | {100 * p['wql_vs_naive']:+.1f} % | "
                      f"{p['cells_better_wql'] if centring == CENTRINGS[1] else ''} |")
    print(f"\nwindow's median residual vs the horizon's median log error over {carry_over['cells']} cells: means "
          f"{100 * carry_over['mean_window_median_residual']:+.2f} % and "
          f"{100 * carry_over['mean_horizon_median_log_error']:+.2f} %, correlation {carry_over['correlation']:.2f}; "
          f"RMS of the horizon's error around the window median "
          f"{carry_over['rms_horizon_error_around_window_median']:.4f}, around the forecast "
          f"{carry_over['rms_horizon_error_around_forecast']:.4f}")
    OUT.mkdir(exist_ok=True)
    stem = OUT / f"quantile_centre_{args.name}"
    stem.with_suffix(".json").write_text(json.dumps({"pools": pools, "carry_over": carry_over, "cells": records},
                                                    indent=1))
    plot(pools, records, stem.with_suffix(".png"))
    print(f"wrote {stem}.json and .png")


if __name__ == "__main__":
    main()
