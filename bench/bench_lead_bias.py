"""The horizon's bias by lead week on stored models, and what inputs make of it: the lead, the plan's end, the trend.

For each recorded cell named (bench_quantile_centre.recorded_cells: robustness cells and christmas-clean retrains
under the work dirs, with --retrain another variant's retrains too), the cell's committed model runs its forward
pass (as predict does, no retraining) on the horizon rows as prepared, and on the same rows with one input changed:
- `lead-1`: LeadDays = 1 on every row (the model's learnt effect of the distance to the origin taken out);
- `before-<n>`: each Before<Event> count that counts down to the plan's last day (no event follows in the plan, so
  the seed's count runs to the store's last row as if an event fell there: LeadDays - Before = 48) set to -n, an
  event n days away (a serve-time guess; training rows always see their real next event);
- `lead-1+before-60`;
- `before-year-ago`: each such count set to the same store's count 364 days earlier (same weekday, from the train
  and validation splits) where that one lies further off (the event's distance a year ago, a guess from the history);
- `trend-oracle`: trend and trend_de set to the googletrend.csv week each row's own date falls in (the full file
  beside the cell: the truth, not known at D), and `trend-persistence`: both set to the last week ended by D, without
  the season's drift that prepare adds: how much of the bias the trend's unknowable path makes;
- with --lightgbm, `lightgbm`: bench_robustness.py's LightGBM reference fitted on the cell's prepared features (the
  same inputs, another learner), scored the same way.
Reports, pooled over the cells, the median log(expected / forecast) per lead week (the truth's point-in-time-free
expectation; > 0: the forecast is low) and per cell the exp-RMSPE against the truth's sales with each change.
Writes bench/out/lead_bias_<name>.json.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/bench_lead_bias.py \\
        --workdir /work/bench-s35 --workdir /work/bench-s36 --cells c0120,C0610,cc-g0305 [--fills 30,60,100]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from bench_horizon_level import EVENTS, ORIGIN_BLOCK_DAYS, committed_dir, lead_week_of, stored_model, truth
from bench_quantile_centre import recorded_cells
from bench_quantile_origins import LEAD_WEEKS

from rossmann_jobs import metrics

OUT = Path(__file__).resolve().parent / "out"


def censored_before(test: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per event, the rows whose Before count runs to the plan's last day (no event of that kind follows in it)."""
    return {event: ((test.LeadDays - test[f"Before{event}"]) == ORIGIN_BLOCK_DAYS).to_numpy() for event in EVENTS}


def changed_inputs(test: pd.DataFrame, fills: list[int]) -> dict[str, pd.DataFrame]:
    censored = censored_before(test)

    def filled(rows: pd.DataFrame, days: int) -> pd.DataFrame:
        return rows.assign(**{f"Before{event}": rows[f"Before{event}"].where(~censored[event], -float(days))
                              for event in EVENTS})
    return {"as prepared": test, "lead-1": test.assign(LeadDays=1.0),
            **{f"before-{days}": filled(test, days) for days in fills},
            "lead-1+before-60": filled(test, 60).assign(LeadDays=1.0)}


def before_year_ago(test: pd.DataFrame, features: Path) -> pd.DataFrame:
    """The censored Before counts set to the store's count 364 days earlier where that one is further off."""
    columns = [f"Before{event}" for event in EVENTS]
    history = pd.concat([pd.read_parquet(features / split, columns=["StoreId", "Date", *columns])
                         for split in ("train", "validation")])
    history["Date"] = pd.to_datetime(history.Date)
    year_ago = (test[["StoreId"]].assign(Date=pd.to_datetime(test.Date) - pd.Timedelta(days=364))
                .merge(history, on=["StoreId", "Date"], how="left"))
    censored = censored_before(test)
    return test.assign(**{
        f"Before{event}": np.where(censored[event] & (year_ago[f"Before{event}"] < test[f"Before{event}"]).to_numpy(),
                                   year_ago[f"Before{event}"], test[f"Before{event}"]).astype(np.float32)
        for event in EVENTS})


def trend_inputs(test: pd.DataFrame, full: Path, as_of: pd.Timestamp) -> dict[str, pd.DataFrame]:
    """trend-oracle and trend-persistence (see the module's docstring) from the full googletrend.csv beside the cell."""
    weeks = pd.read_csv(full / "googletrend.csv")
    weeks["sunday"] = pd.to_datetime(weeks.week.str.slice(0, 10))
    weeks["State"] = weeks.file.str.removeprefix("Rossmann_DE").str.removeprefix("_")
    # the trend file of "HB,NI" (Bremen and Lower Saxony) is Rossmann_DE_NI, as in the seed's join
    state = test.StoreId.map(pd.read_csv(full / "store_states.csv").set_index("Store").State).replace("HB,NI", "NI")
    dates = pd.to_datetime(test.Date)
    # the week that starts on the Sunday ending the row's ISO week (features/point_in_time.py, strict mode)
    sunday = dates + pd.to_timedelta(6 - dates.dt.weekday, unit="D")
    by_state = weeks[weeks.State != ""].set_index(["State", "sunday"]).trend
    germany = weeks[weeks.State == ""].set_index("sunday").trend
    known = weeks[weeks.sunday + pd.Timedelta(days=6) <= as_of]
    last = known[known.sunday == known.sunday.max()].set_index("State").trend

    def values(series: pd.Series) -> np.ndarray:
        return series.to_numpy(dtype=np.float32)
    return {"trend-oracle": test.assign(trend=values(by_state.reindex(list(zip(state, sunday)))),
                                        trend_de=values(germany.reindex(sunday))),
            "trend-persistence": test.assign(trend=values(state.map(last)), trend_de=np.float32(last[""]))}


def cell_probes(home: Path, cell: Path, fills: list[int], with_lightgbm: bool) -> dict:
    forward = stored_model(home)
    test = pd.read_parquet(committed_dir(home / "features") / "test")
    actual = (test[["StoreId", "Date"]].assign(Date=pd.to_datetime(test.Date))
              .merge(truth(cell), on=["StoreId", "Date"], how="left"))
    sold = (actual.Sales > 0).to_numpy()
    sales = actual.Sales.to_numpy()[sold]
    log_expected = np.log(actual.ExpectedSales.to_numpy()[sold])
    week = lead_week_of(test.LeadDays)[sold]
    out = {"share_censored": {event: round(float(rows.mean()), 4) for event, rows in censored_before(test).items()}}
    features = committed_dir(home / "features")
    as_of = pd.to_datetime(test.Date).min() - pd.Timedelta(days=1)
    inputs = {**changed_inputs(test, fills), "before-year-ago": before_year_ago(test, features),
              **trend_inputs(test, cell.parent / "full", as_of)}
    forecasts = {name: forward(rows) for name, rows in inputs.items()}
    if with_lightgbm:
        from bench_robustness import lightgbm_forecast

        from rossmann_jobs.features import spec
        lightgbm, _fit = lightgbm_forecast(str(home / "features"), spec)
        sales_by_id = test[["Id"]].astype({"Id": int}).merge(lightgbm, on="Id", how="left").Sales.to_numpy()
        forecasts["lightgbm"] = np.log(np.where(sales_by_id > 0, sales_by_id, np.nan))
    for name, log_forecast in forecasts.items():
        log_forecast = log_forecast[sold]
        error = log_expected - log_forecast
        known = ~np.isnan(log_forecast)   # NaN: a row lightgbm forecast no sales for
        out[name] = {"exp_rmspe": metrics.exp_rmspe(sales[known], np.exp(log_forecast[known])),
                     "bias_by_lead_week": [float(np.nanmedian(error[week == w])) for w in LEAD_WEEKS]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", action="append", required=True, type=Path)
    parser.add_argument("--cells", required=True, help="comma-separated labels (cc-<label>: a christmas-clean retrain)")
    parser.add_argument("--fills", default="30,60,100", help="days for the before-<n> changes")
    parser.add_argument("--lightgbm", action="store_true", help="also LightGBM on the same features (pip lightgbm)")
    parser.add_argument("--retrain", action="append", default=[], help="also bench_horizon_level's retrains of this "
                        "variant, labelled <variant>:<label> (e.g. without-before-counts:c0430 in --cells)")
    parser.add_argument("--name", default="s37")
    args = parser.parse_args()
    labels, fills = set(args.cells.split(",")), [int(v) for v in args.fills.split(",")]
    cells = {}
    for workdir in args.workdir:
        retrains = {"christmas-clean": "cc-", **{variant: f"{variant}:" for variant in args.retrain}}
        for label, cell, run in recorded_cells(workdir, retrains):
            if label in labels:
                cells[f"{label} {cell.parent.name}"] = cell_probes(run.parents[1], cell, fills, args.lightgbm)
                print(f"  {label} {cell.parent.name}: exp-RMSPE " + ", ".join(
                    f"{name} {v['exp_rmspe']:.4f}" for name, v in cells[f"{label} {cell.parent.name}"].items()
                    if name != "share_censored"), flush=True)
    names = [name for name in next(iter(cells.values())) if name != "share_censored"]
    pooled = {}
    for name in names:
        change = np.array([c[name]["exp_rmspe"] / c["as prepared"]["exp_rmspe"] - 1 for c in cells.values()])
        bias = np.mean([c[name]["bias_by_lead_week"] for c in cells.values()], axis=0)
        pooled[name] = {"bias_by_lead_week": [float(v) for v in bias], "exp_rmspe_change_mean": float(change.mean()),
                        "exp_rmspe_change_range": [float(change.min()), float(change.max())],
                        "cells_better": int((change < 0).sum())}
    print(f"\n| inputs ({len(cells)} cells) | median log(expected / forecast) by lead week 1..7, mean over cells (%) |"
          " exp-RMSPE change: mean (range) | better in |")
    print("|---|---|---|---:|")
    for name, p in pooled.items():
        weeks = " ".join(f"{100 * v:+.1f}" for v in p["bias_by_lead_week"])
        low, high = p["exp_rmspe_change_range"]
        print(f"| {name} | {weeks} | {100 * p['exp_rmspe_change_mean']:+.1f} % "
              f"({100 * low:+.1f} .. {100 * high:+.1f} %) | {p['cells_better']} of {len(cells)} |")
    OUT.mkdir(exist_ok=True)
    path = OUT / f"lead_bias_{args.name}.json"
    path.write_text(json.dumps({"pooled": pooled, "cells": cells}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
