"""What per-(cell, lead week) P10-P90 coverage a forecast made at D can reach: the model beside two yardsticks.

Issue 36 asks 77-83 % coverage per lead week. Each lead week of one origin carries its own shocks after D (weather,
the Google trend, level shifts): the generator's truth separates them, as ExpectedSales / PointInTimeExpectedSales
(what happened vs what was knowable at D). For bench_robustness.py cells already run (their work dir), this scores
per (cell, lead week):
- **model**: the product's forecast_quantiles.csv;
- **exact**: the noise's quantiles around ExpectedSales (knows every shock: calibrated by construction);
- **fair at D**: centred on PointInTimeExpectedSales, with the scenario's noise plus the shocks of that lead week
  pooled over all the given cells (it knows how large a week's shocks run over origins, not which one comes; the
  pool is these cells' own, which favours it).
and the median shock per (cell, week). Writes bench/out/coverage_yardstick_<name>.json and prints the tables.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/bench_coverage_yardstick.py \\
        --workdir W --cells baseline-1115:cur0731:2015-07-31,mixed-1115:cur0731m:2015-07-31 [--name s30]
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
from bench_quantile_origins import LEAD_WEEKS, TARGET_COVERAGE, in_target  # bench/, this script's folder

from rossmann_jobs import storage
from rossmann_jobs.metrics import coverage
from rossmann_jobs.output_layout import QUANTILES_FILE
from rossmann_jobs.synth.dataset import build_dataset
from rossmann_jobs.synth.scenarios import scenario_config
from rossmann_jobs.synth.truth_scores import exact_quantiles, horizon_truth

REPO = Path(__file__).resolve().parents[1]
FAIR_DRAWS = 200_000


def cell_rows(workdir: Path, scenario: str, stores: int, label: str, as_of: dt.date, dataset) -> pd.DataFrame:
    """The horizon's scored rows (Sales > 0): truth, the model's P10 and P90, the lead week and the shock."""
    predictions = str(workdir / f"{scenario}-{stores}" / label / "runs" / "run" / "predictions")
    model = pd.read_csv(io.BytesIO(storage.read_bytes(storage.join(storage.committed_uri(predictions),
                                                                   QUANTILES_FILE))), parse_dates=["Date"])
    rows = model.merge(horizon_truth(dataset, as_of), on=["Store", "Date"], validate="one_to_one")
    rows = rows[rows["Sales"] > 0]
    return rows.assign(cell=f"{scenario}/{stores} {as_of}", scenario=scenario,
                       week=np.clip(-(-(rows["Date"] - pd.Timestamp(as_of)).dt.days // 7), 1, max(LEAD_WEEKS)),
                       shock=np.log(rows["ExpectedSales"] / rows["PointInTimeExpectedSales"]))


def scores(rows: pd.DataFrame, sigma: dict[str, float], rng: np.random.Generator) -> dict[str, dict]:
    """{cell: {week: {model, exact, fair_at_d, shock_median}}}."""
    result: dict[str, dict] = {}
    pooled = {week: shocks.to_numpy() for week, shocks in rows.groupby("week")["shock"]}   # every cell's, per week
    for (cell, week), group in rows.groupby(["cell", "week"]):
        noise = sigma[group["scenario"].iloc[0]]
        exact = exact_quantiles(group["ExpectedSales"].to_numpy(float), noise, (0.1, 0.9))
        draws = rng.choice(pooled[week], FAIR_DRAWS) + rng.normal(0.0, noise, FAIR_DRAWS)
        low, high = np.exp(np.quantile(draws, [0.1, 0.9]))
        knowable = group["PointInTimeExpectedSales"]
        result.setdefault(cell, {})[int(week)] = {
            "model": coverage(group["Sales"], group["P10"], group["P90"]),
            "exact": coverage(group["Sales"], exact[:, 0], exact[:, 1]),
            "fair_at_d": coverage(group["Sales"], low * knowable, high * knowable),
            "shock_median": float(group["shock"].median())}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="bench_robustness.py's work dir")
    parser.add_argument("--cells", required=True, help="SCENARIO-STORES:LABEL:AS_OF,... (cells already run)")
    parser.add_argument("--seed", type=int, default=7, help="the generator seed the cells were run with")
    parser.add_argument("--name", default="latest")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args()
    datasets, sigma, frames = {}, {}, []
    for spec in args.cells.split(","):
        cell, label, as_of = spec.split(":")
        scenario, _, stores = cell.rpartition("-")
        if cell not in datasets:
            config = scenario_config(scenario, int(stores), args.seed)
            datasets[cell], sigma[scenario] = build_dataset(config), config.sigma
        frames.append(cell_rows(args.workdir, scenario, int(stores), label, dt.date.fromisoformat(as_of),
                                datasets[cell]))
    table = scores(pd.concat(frames, ignore_index=True), sigma, np.random.default_rng(0))
    names = ("model", "exact", "fair_at_d")
    print("| cell | " + " | ".join(f"{name} by lead week 1..7" for name in names) + " | shock by lead week (%) |")
    print("|---|" + "---|" * (len(names) + 1))
    for cell, weeks in table.items():
        columns = [" ".join(f"{100 * weeks[w][name]:.0f}" for w in sorted(weeks)) for name in names]
        shocks = " ".join(f"{100 * weeks[w]['shock_median']:+.1f}" for w in sorted(weeks))
        print(f"| {cell} | " + " | ".join(columns) + f" | {shocks} |")
    summary = {name: {"weeks_in_target": in_target([{w: v[name] for w, v in weeks.items()}
                                                      for weeks in table.values()]),
                      "mean_by_lead_week": {w: float(np.mean([weeks[w][name] for weeks in table.values()
                                                               if w in weeks])) for w in LEAD_WEEKS}}
               for name in names}
    print(f"\n| interval | (cell, week) in {100 * TARGET_COVERAGE[0]:.0f}-{100 * TARGET_COVERAGE[1]:.0f} % | "
          "mean by lead week 1..7 |\n|---|---:|---|")
    for name, value in summary.items():
        weeks = " ".join(f"{100 * v:.1f}" for v in value["mean_by_lead_week"].values())
        print(f"| {name} | {100 * value['weeks_in_target']:.0f} % | {weeks} |")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"coverage_yardstick_{args.name}.json"
    path.write_text(json.dumps({"cells": args.cells, "seed": args.seed, "by_cell": table, "summary": summary,
                                "target_coverage": TARGET_COVERAGE}, indent=2))
    print(f"\nJSON: {path}")


if __name__ == "__main__":
    main()
