"""Quantile calibration rules tried on recorded cells: predict re-run on each cell's stored model with one rule changed.

Reads cells that bench/bench_robustness.py ran (`<workdir>/<scenario>-<stores>/<label>/`: the prepared features,
`runs/run`'s model and predictions, the drop under `drops/<as-of>`, the truth beside it), re-runs the product's predict
job (spark-submit, as the DAG does) on the same model and features with one calibration rule patched into
forecast/quantiles.py, and scores the product's stored predictions and each rule's against the truth's sales: P10-P90
coverage by lead week, weighted quantile loss against the naive baseline's quantiles, the interval's width. Rules:
- `no-week-shocks`: each lead week's residuals (with the trend's drift both ways, as the product) alone, centred on
  their own median: the product before session 39, which now places each week's spread at every lead week's median
  in turn (`quantiles.residual_quantiles`' weekly_shocks; sessions 37 and 39 measured that as the rule `week-shocks`);
- `as-built`: the product's rule as this checkout has it (the stored predictions may come from an older one).
A rule's predictions are kept under the cell's run (`predictions-<rule>`) and reused: delete them after a change.
Writes bench/out/quantile_rules_<name>.json and prints the tables. Offline: no product code is changed.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/bench_quantile_rules.py \\
        --workdir /work/bench-s35 --cells baseline-1115:F0731:2015-07-31,noisy-150:f0430:2015-04-30 \\
        [--rules no-week-shocks] [--name s36]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RULE_FLAG = "--quantile-rule"


def no_week_shocks(product_quantiles):
    """The rule before session 39: each week's quantiles from its own rows only (quantiles.residual_quantiles'
    weekly_shocks off)."""
    from functools import partial

    return partial(product_quantiles, weekly_shocks=False)


def as_built(product_quantiles):
    """The product's own rule: predict re-run with the code of this checkout (its stored predictions may be older)."""
    return product_quantiles


# rule -> (the product's residual_quantiles -> the rule's)
RULES = {"as-built": as_built, "no-week-shocks": no_week_shocks}


def predict_with_rule(rule: str, args: list[str]) -> None:
    """Inside spark-submit: the product's predict job with the rule patched in."""
    sys.path.insert(0, str(REPO))
    from rossmann_jobs import predict
    from rossmann_jobs.forecast import quantiles

    if rule not in RULES:
        raise SystemExit(f"unknown rule {rule!r}: {', '.join(RULES)}")
    quantiles.residual_quantiles = RULES[rule](quantiles.residual_quantiles)
    sys.argv = [sys.argv[0], *args]
    predict.main()


def run_rule(cell: Path, raw: Path, rule: str) -> str:
    """Predict with the rule into the cell's run (once); the output's name under the run."""
    run = cell / "runs" / "run"
    out = run / f"predictions-{rule}"
    if (out / "_SUCCESS").exists():
        return out.name
    jobs_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{jobs_bin}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO),
           "ROSSMANN_STORAGE_ROOT": str(cell)}
    command = [str(jobs_bin / "spark-submit"), "--master", "local[2]", "--driver-memory", "2g",
               "--conf", "spark.ui.enabled=false", __file__, RULE_FLAG, rule,
               "--model", str(run / "model"), "--features", str(cell / "features"), "--raw", str(raw),
               "--out", str(out)]
    started = time.perf_counter()
    with open(run / f"predict-{rule}.log", "w") as log:
        code = subprocess.run(command, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        sys.exit(f"predict with {rule} failed (exit {code}): {run / f'predict-{rule}.log'}")
    print(f"  {cell.parent.name}/{cell.name} {rule}: {time.perf_counter() - started:.0f} s", flush=True)
    return out.name


def scores(cell: Path, name: str) -> dict:
    """The interval's scores and median log width by lead week of the cell's run's predictions `name`."""
    import bench_horizon_level as bhl

    rows = bhl.scored_horizon(cell, cell / "runs" / "run", name)
    interval = bhl.interval_scores(rows)
    width = np.log(rows.SalesP90 / rows.SalesP10)
    return {"coverage": round(interval["coverage"], 4), "coverage_by_lead_week": interval["coverage_by_lead_week"],
            "log_width_by_lead_week": [round(float(v), 4) for v in width.groupby(rows.LeadWeek).median()],
            "wql_vs_naive": round(interval["wql_vs_naive"], 4)}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--cells", required=True, help="comma-separated scenario-stores:label:as-of")
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--name", default="run")
    args = parser.parse_args()
    rules = [rule for rule in args.rules.split(",") if rule]
    if set(rules) - set(RULES):
        parser.error(f"--rules: {sorted(set(rules) - set(RULES))} unknown")
    record = {"cells": {}, "rules": rules}
    for spec in args.cells.split(","):
        scenario_stores, label, as_of = spec.split(":")
        cell = args.workdir / scenario_stores / label
        entry = {"as_of": as_of, "product": scores(cell, "predictions")}
        for rule in rules:
            entry[rule] = scores(cell, run_rule(cell, args.workdir / scenario_stores / "drops" / as_of, rule))
        record["cells"][f"{scenario_stores} {as_of}"] = entry
    out = REPO / "bench" / "out" / f"quantile_rules_{args.name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    for rule in ["product", *rules]:
        print(f"\n{rule}: coverage by lead week 1..7 (%), wQL vs naive, median log width week 1 / 7")
        for name, entry in record["cells"].items():
            s = entry[rule]
            print(f"  {name:32s} {' '.join(f'{100 * v:5.1f}' for v in s['coverage_by_lead_week'])}"
                  f"  {100 * s['wql_vs_naive']:+6.1f} %  {s['log_width_by_lead_week'][0]:.3f} / "
                  f"{s['log_width_by_lead_week'][-1]:.3f}")
        for stores in sorted({name.split()[0].split("-")[-1] for name in record["cells"]}, key=int):
            group = [e[rule] for n, e in record["cells"].items() if n.split()[0].endswith(f"-{stores}")]
            weeks = np.mean([s["coverage_by_lead_week"] for s in group], axis=0)
            print(f"  mean {stores:>5} stores ({len(group)})      {' '.join(f'{100 * v:5.1f}' for v in weeks)}"
                  f"  {100 * np.mean([s['wql_vs_naive'] for s in group]):+6.1f} %")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == RULE_FLAG:
        predict_with_rule(sys.argv[2], sys.argv[3:])
    else:
        main()
