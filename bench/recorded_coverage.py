"""Coverage by lead week pooled from recorded results: the product's cells beside a perfectly calibrated interval's.

bench_quantile_origins.py pools the robustness JSONs of one work dir. The cells of the current quantile rule were
scored in two sessions whose work dirs are gone; their per-cell figures are kept in bench/results/
(near_event_days-*-s28.json: the "after" of each cell; quantile_lead_line-*-s29.json: the "product" rule on six new
cells). This pools those, and sets beside them what the truth's own noise quantiles around the realized expectation
("exact": an interval that knows every shock of the horizon and is calibrated by construction) covered in the same
weeks of the same cells where they were recorded (seasonal_trend-*-s25.json, year_as_trained-*-s26.json; "exact" does
not depend on the model). Prints the tables; writes bench/out/recorded_coverage.json.

    python3 bench/recorded_coverage.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_quantile_origins import LEAD_WEEKS, TARGET_COVERAGE, in_target  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CHRISTMAS_ORIGINS = {"2014-11-30"}   # horizons over Christmas: reported apart


def product_cells() -> dict[str, dict]:
    """'scenario/stores as-of' -> coverage by lead week and wQL vs naive, for the current rule."""
    cells = {}
    near_event = json.loads(next(RESULTS.glob("near_event_days-*-s28.json")).read_text())
    for name, cell in near_event["cells"].items():
        after = cell["after"]
        cells[name] = {"weeks": dict(zip(LEAD_WEEKS, after["coverage_by_lead_week"])),
                       "wql_vs_naive": after["wql_vs_naive"]}
    lead_line = json.loads(next(RESULTS.glob("quantile_lead_line-*-s29.json")).read_text())
    for row in lead_line["new_cells"]:
        if row["rule"] == "product":
            name = row["cell"].replace("-150 ", "/150 ")
            cells[name] = {"weeks": {w: row[f"w{w}"] for w in LEAD_WEEKS}, "wql_vs_naive": row["wql"]}
    return cells


def exact_by_cell() -> dict[str, dict[int, float]]:
    """'scenario/stores as-of' -> the exact interval's coverage by lead week, from every recorded robustness result."""
    found: dict[str, dict[int, float]] = {}

    def walk(node) -> None:
        if isinstance(node, dict):
            if {"stores", "as_of", "quantiles"} <= set(node) and node["quantiles"]:
                weeks = node["quantiles"]["exact"]["by_lead_week"]
                cell = f"{node['scenario']}/{node['stores']} {node['as_of']}"
                found[cell] = {int(w): v["coverage"] for w, v in weeks.items()}
            for value in node.values():
                walk(value)

    for name in ("seasonal_trend-*-s25.json", "year_as_trained-*-s26.json"):
        walk(json.loads(next(RESULTS.glob(name)).read_text()))
    return found


def percents(values, digits: int = 0) -> str:
    return " ".join(f"{100 * value:.{digits}f}" for value in values)


def pooled(cells: dict[str, dict]) -> dict:
    weeks = np.array([[cell["weeks"][w] for w in LEAD_WEEKS] for cell in cells.values()])
    wql = np.array([cell["wql_vs_naive"] for cell in cells.values()])
    return {"cells": len(cells), "mean_by_lead_week": dict(zip(LEAD_WEEKS, weeks.mean(axis=0).tolist())),
            "weeks_in_target": in_target([cell["weeks"] for cell in cells.values()]),
            "wql_vs_naive_mean": float(wql.mean()), "cells_wql_10_pct_better": int((wql <= -0.10).sum())}


def main() -> None:
    cells, exact = product_cells(), exact_by_cell()
    print("| cell | product by lead week 1..7 | exact by lead week 1..7 | wQL vs naive |\n|---|---|---|---:|")
    for name, cell in sorted(cells.items(), key=lambda item: item[0].split()[::-1]):
        exact_weeks = exact.get(name)
        exact_text = percents(exact_weeks[w] for w in LEAD_WEEKS) if exact_weeks else "not recorded"
        print(f"| {name} | {percents(cell['weeks'][w] for w in LEAD_WEEKS)} | {exact_text} | "
              f"{100 * cell['wql_vs_naive']:+.1f} % |")
    groups = {}
    for stores in ("150", "1115"):
        at_scale = {n: c for n, c in cells.items() if n.split("/")[1].startswith(stores + " ")}
        groups[f"{stores} stores"] = pooled({n: c for n, c in at_scale.items()
                                             if n.split()[-1] not in CHRISTMAS_ORIGINS})
        if any(n.split()[-1] in CHRISTMAS_ORIGINS for n in at_scale):
            groups[f"{stores} stores, Christmas included"] = pooled(at_scale)
    origins = [o for o in exact if o.split()[-1] not in CHRISTMAS_ORIGINS] + [o for o in exact
                                                                               if o.split()[-1] in CHRISTMAS_ORIGINS]
    exact_share = {o: in_target([exact[o]]) for o in origins}
    print(f"\nlead weeks in {100 * TARGET_COVERAGE[0]:.0f}-{100 * TARGET_COVERAGE[1]:.0f} %:")
    print("| group | cells | mean by lead week 1..7 | (cell, week) in target | wQL vs naive, mean | cells >= 10 % "
          "better |\n|---|---:|---|---:|---:|---:|")
    for name, group in groups.items():
        print(f"| {name} | {group['cells']} | "
              f"{percents(group['mean_by_lead_week'].values(), 1)} | "
              f"{100 * group['weeks_in_target']:.0f} % | {100 * group['wql_vs_naive_mean']:+.1f} % | "
              f"{group['cells_wql_10_pct_better']} of {group['cells']} |")
    print("\n| the exact interval: cell | by lead week 1..7 | weeks in target |\n|---|---|---:|")
    for origin in origins:
        print(f"| {origin} | {percents((exact[origin][w] for w in LEAD_WEEKS), 1)} | "
              f"{100 * exact_share[origin]:.0f} % |")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "recorded_coverage.json").write_text(json.dumps(
        {"cells": cells, "groups": groups, "exact_by_cell": exact, "target_coverage": TARGET_COVERAGE}, indent=2))


if __name__ == "__main__":
    main()
