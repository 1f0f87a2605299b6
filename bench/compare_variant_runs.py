"""bench_horizon_level.py's retrained variants against their baseline runs, cell by cell: a table and a picture.

Each cell is `<workdir>/<scenario-stores>/<label>`; a variant's run is the bench's folder
`<workdir>/horizon-level/<variant>-<scenario-stores>-<label><suffix>`, its baseline the cell's own run (the product
that prepared the cell) or, with --suffix (another training seed), `as-prepared-...<suffix>`. `--base LABEL=PATH`
names another baseline for one cell (a cell whose product ran on another training seed than the variant). Each run's
stored predictions are scored against the cell's truth as bench_horizon_level scores them: exp-RMSPE, the median
log(expected / forecast) by lead week (> 0: the forecast is low) and P10-P90 coverage by lead week (the baseline's
stored quantiles: older runs may be centred otherwise). Writes bench/out/compare_variant_runs_<name>.json and .png.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/compare_variant_runs.py --name s38 \\
        --cell /work/bench-s35/growth-150/c0831 --cell /work/bench-s36-7/baseline-150/c0120s7 \\
        --variant without-before-counts --variant year-ago-origin [--suffix -seed43]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from bench_horizon_level import scored_horizon
from bench_quantile_centre import VARIANT_DIR
from bench_quantile_origins import LEAD_WEEKS

from rossmann_jobs import metrics

OUT = Path(__file__).resolve().parent / "out"


def run_scores(cell: Path, home: Path, output: str = "predictions") -> dict | None:
    run = home / "runs" / "run"
    if not (run / output / "_SUCCESS").exists():
        return None
    rows = scored_horizon(cell, run, output)
    error = np.log(rows.ExpectedSales / rows.SalesForecast)
    # unrounded, unlike bench_horizon_level.interval_scores' (4 digits): main() pools them weighted by rows
    inside = metrics.in_interval(rows.Sales, rows.SalesP10, rows.SalesP90)
    exp_rmspe = metrics.exp_rmspe(rows.Sales, rows.SalesForecast)
    return {"run": str(home), "exp_rmspe": exp_rmspe,
            "bias_by_lead_week": [float(error[rows.LeadWeek == w].median()) for w in LEAD_WEEKS],
            "coverage_by_lead_week": [float(inside[rows.LeadWeek == w].mean()) for w in LEAD_WEEKS],
            "rows_by_lead_week": [int((rows.LeadWeek == w).sum()) for w in LEAD_WEEKS]}


def plot(cells: dict, variants: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    names = list(cells)
    figure, axis = plt.subplots(figsize=(10, 0.45 * len(names) + 1.6))
    for offset, variant in enumerate(variants):
        label = variant
        for row, name in enumerate(names):
            change = cells[name]["changes"].get(variant)
            if change is not None:
                axis.barh(row + (offset - (len(variants) - 1) / 2) * 0.8 / len(variants), 100 * change,
                          height=0.8 / len(variants), color=f"C{offset}", label=label)
                label = None   # one legend entry per variant
    axis.axvline(0, color="gray", linewidth=0.8)
    axis.set_yticks(range(len(names)), [f"{n}{'  (January)' if cells[n]['january'] else ''}" for n in names],
                    fontsize=8)
    axis.invert_yaxis()
    axis.set(xlabel="exp-RMSPE change against the baseline run (%; left: better)",
             title="retrained variants, cell by cell (January origins marked)")
    axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", action="append", required=True, type=Path)
    parser.add_argument("--variant", action="append", required=True)
    parser.add_argument("--suffix", default="", help="the variants' --run-suffix (baseline: as-prepared<suffix>)")
    parser.add_argument("--base", action="append", default=[], help="LABEL=PATH: that cell's baseline run folder")
    parser.add_argument("--base-output", default="predictions", help="the baseline run's predictions folder, e.g. "
                        "predictions-as-built (bench_quantile_rules.py: predict re-run with this checkout's rule)")
    parser.add_argument("--name", default="latest")
    args = parser.parse_args()
    bases = dict(item.split("=", 1) for item in args.base)
    cells = {}
    for cell in args.cell:
        tag = f"{cell.parent.name}-{cell.name}"
        variants_dir = cell.parents[1] / VARIANT_DIR
        base_home = Path(bases[cell.name]) if cell.name in bases else (
            variants_dir / f"as-prepared-{tag}{args.suffix}" if args.suffix else cell)
        base = run_scores(cell, base_home, args.base_output)
        if base is None:
            continue
        runs = {v: run_scores(cell, variants_dir / f"{v}-{tag}{args.suffix}") for v in args.variant}
        runs = {v: r for v, r in runs.items() if r is not None}
        summary = json.loads((base_home / "runs" / "run" / "predictions" / "_SUCCESS").read_text())["summary"]
        cells[f"{cell.parent.name} {cell.name} {summary['as_of']}"] = {
            "cell": str(cell), "stores": int(cell.parent.name.rsplit("-", 1)[1]),
            "january": summary["as_of"][5:7] == "01", "baseline": base, "variants": runs,
            "changes": {v: r["exp_rmspe"] / base["exp_rmspe"] - 1 for v, r in runs.items()}}
    print("| cell | run | exp-RMSPE | change | log(expected / forecast) by lead week 1..7 (%) "
          "| P10-P90 coverage by lead week (%) |\n|---|---|---:|---:|---|---|")
    for name, c in cells.items():
        for run, scores in (("baseline", c["baseline"]), *c["variants"].items()):
            change = "" if run == "baseline" else f"{100 * c['changes'][run]:+.1f} %"
            print(f"| {name} | {run} | {scores['exp_rmspe']:.4f} | {change} | "
                  f"{' '.join(f'{100 * v:+.1f}' for v in scores['bias_by_lead_week'])} | "
                  f"{' '.join(f'{100 * v:.0f}' for v in scores['coverage_by_lead_week'])} |")
    print("\n| variant | cells | exp-RMSPE change: mean (range) | better in | January origins |"
          "\n|---|---:|---|---:|---|")
    pooled = {}
    for variant in args.variant:
        changes = {n: c["changes"][variant] for n, c in cells.items() if variant in c["changes"]}
        if not changes:
            continue
        values = np.array(list(changes.values()))
        january = [f"{100 * v:+.1f} %" for n, v in changes.items() if cells[n]["january"]]
        pooled[variant] = {"cells": len(values), "mean": float(values.mean()), "better": int((values < 0).sum()),
                           "range": [float(values.min()), float(values.max())]}
        print(f"| {variant} | {len(values)} | {100 * values.mean():+.1f} % ({100 * values.min():+.1f} .. "
              f"{100 * values.max():+.1f} %) | {pooled[variant]['better']} of {len(values)} | {', '.join(january)} |")
    print("\n| run | stores | cells | P10-P90 coverage by lead week 1..7, pooled over rows (%) |\n|---|---:|---:|---|")
    for run in ("baseline", *args.variant):
        for stores in sorted({c["stores"] for c in cells.values()}):
            group = [c["baseline"] if run == "baseline" else c["variants"].get(run) for c in cells.values()
                     if c["stores"] == stores]
            group = [g for g in group if g is not None]
            if not group:
                continue
            weights = np.array([g["rows_by_lead_week"] for g in group], dtype=float)
            pooled_coverage = (np.array([g["coverage_by_lead_week"] for g in group]) * weights).sum(0) / weights.sum(0)
            pooled.setdefault("coverage", {})[f"{run} {stores}"] = [float(v) for v in pooled_coverage]
            print(f"| {run} | {stores} | {len(group)} | {' '.join(f'{100 * v:.1f}' for v in pooled_coverage)} |")
    OUT.mkdir(exist_ok=True)
    (OUT / f"compare_variant_runs_{args.name}.json").write_text(json.dumps({"cells": cells, "pooled": pooled},
                                                                         indent=1))
    plot(cells, [v for v in args.variant if v in pooled and v != "coverage"],
         OUT / f"compare_variant_runs_{args.name}.png")
    print(f"\nwrote {OUT / f'compare_variant_runs_{args.name}.json'} and .png")


if __name__ == "__main__":
    main()
