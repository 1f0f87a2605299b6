"""How far prepare's projected Google trend is from the one the point-in-time floor knows, by origin across the year.

For each generator draw (--seeds) and origin (--origins: by default the 15th and the last day of every month from
2014-08 to 2015-07), the horizon's trend factor of sales (synth/sales.py trend_factor, the generator's elasticities)
three ways: prepare's (the last googletrend week ended by D moved by features/point_in_time.py seasonal_drift, read
from the weeks up to D), persistence (that week unmoved) and the floor's (moved by the trend's known season,
synth/trend.py known_log_interest). Reported: the median over stores of log(projected / floor's) per lead week, its
mean (a bias) and RMS by origin month. No Spark and no training: the generator alone, a few seconds a draw.
The network's and LightGBM's median bias follow this error across the year (docs/decisions.md), so a bias here
becomes a bias of the forecast. Writes bench/out/trend_projection.json and prints a table.

    PYTHONPATH=. .venvs/jobs/bin/python bench/bench_trend_projection.py [--seeds 201,...] [--origins ...] [--stores 150]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
from pathlib import Path

import numpy as np

from rossmann_jobs.features.point_in_time import seasonal_drift
from rossmann_jobs.synth.dataset import build_dataset
from rossmann_jobs.synth.sales import trend_factor
from rossmann_jobs.synth.scenarios import scenario_config
from rossmann_jobs.synth.trend import known_log_interest

REPO = Path(__file__).resolve().parents[1]
HORIZON_DAYS, LEAD_WEEKS = 48, 7
MONTHS = (8, 9, 10, 11, 12, 1, 2, 3, 4, 5, 6, 7)


def default_origins() -> list[dt.date]:
    origins = []
    for month in MONTHS:
        year = 2014 if month >= 8 else 2015
        next_month = dt.date(year + (month == 12), month % 12 + 1, 1)
        origins += [dt.date(year, month, 15), next_month - dt.timedelta(days=1)]
    return origins


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default=",".join(str(seed) for seed in range(201, 231)),
                        help="generator draws, comma-separated (default: 30 draws never used for a choice)")
    parser.add_argument("--origins", default=",".join(day.isoformat() for day in default_origins()))
    parser.add_argument("--stores", type=int, default=150)
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "out" / "trend_projection.json")
    return parser.parse_args()


def lead_week_errors(seed: int, stores: int, origins: list[dt.date]) -> dict[str, dict[str, list[float]]]:
    """{origin: {"prepare": [...], "persistence": [...]}}: per lead week, the median over store-days of
    log(projected trend factor / the floor's)."""
    grids = build_dataset(scenario_config("baseline", stores, seed)).grids
    calendar, model, trends = grids.calendar, grids.sales_model, grids.trends
    season = known_log_interest(trends.week_start)
    week_ends = np.array([np.datetime64(start + dt.timedelta(days=6)) for start in trends.week_start])

    def factor(relative: np.ndarray) -> np.ndarray:
        return trend_factor(relative[:, model.trend_columns], relative[:, 0], model.trend_scale)

    errors = {}
    for as_of in origins:
        as_of_index = int(np.searchsorted(calendar.dates, np.datetime64(as_of)))
        days = np.arange(as_of_index + 1, min(as_of_index + 1 + HORIZON_DAYS, calendar.num_days))
        last = int(np.nonzero(week_ends <= np.datetime64(as_of))[0].max())
        weeks = trends.day_to_week[days]
        history = [(trends.week_start[week], float(value)) for week in range(last + 1) for value in trends.values[week]]
        horizon_weeks = sorted(set(weeks.tolist()))
        drifts = dict(zip(horizon_weeks, seasonal_drift(
            history, [(trends.week_start[last], trends.week_start[week]) for week in horizon_weeks])))
        last_relative = model.relative_trend_by_week[[last]]
        floor = factor(last_relative * np.exp(season[weeks] - season[last])[:, None])
        projected = {"prepare": factor(last_relative * np.exp([drifts[week] for week in weeks])[:, None]),
                     "persistence": factor(np.repeat(last_relative, len(days), axis=0))}
        lead_week = np.arange(len(days)) // 7
        errors[as_of.isoformat()] = {
            name: [float(np.median(np.log(values / floor)[lead_week == week])) for week in range(LEAD_WEEKS)]
            for name, values in projected.items()}
    return errors


def by_month(errors: dict[int, dict], method: str) -> dict[int, dict[str, float]]:
    summary = {}
    for month in MONTHS:
        values = np.array([error for cells in errors.values() for origin, cell in cells.items()
                           if dt.date.fromisoformat(origin).month == month for error in cell[method]])
        if values.size:
            summary[month] = {"mean": float(values.mean()), "rms": float(np.sqrt(np.mean(values ** 2)))}
    return summary


def main() -> None:
    args = parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    origins = [dt.date.fromisoformat(day) for day in args.origins.split(",")]
    errors = {}
    for seed in seeds:
        errors[seed] = lead_week_errors(seed, args.stores, origins)
        print(f"seed {seed}: {len(origins)} origins", flush=True)
    summary = {}
    for method in ("prepare", "persistence"):
        everything = np.array([e for cells in errors.values() for cell in cells.values() for e in cell[method]])
        summary[method] = {"rms": float(np.sqrt(np.mean(everything ** 2))), "mean": float(everything.mean()),
                           "by_month": by_month(errors, method)}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"seeds": seeds, "stores": args.stores, "origins": args.origins.split(","),
                                     "summary": summary, "errors": {str(k): v for k, v in errors.items()},
                                     "machine": platform.node()}, indent=1))
    print(f"\nlog(projected trend factor / the floor's), over {len(seeds)} draws x {len(origins)} origins x "
          f"{LEAD_WEEKS} lead weeks")
    print("| method | all: mean | all: RMS | " + " | ".join(f"month {m}: mean / RMS" for m in MONTHS) + " |")
    print("|---|---:|---:|" + "---:|" * len(MONTHS))
    for method, values in summary.items():
        months = " | ".join(f"{values['by_month'][m]['mean']:+.3f} / {values['by_month'][m]['rms']:.3f}"
                            if m in values["by_month"] else "-" for m in MONTHS)
        print(f"| {method} | {values['mean']:+.4f} | {values['rms']:.4f} | {months} |")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
