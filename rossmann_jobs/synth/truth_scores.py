"""A forecast for as-of D scored against the generator's truth: the hidden sales of the horizon, beside the floors.
`python -m rossmann_jobs.synth score --stores N --seed S --as-of D --raw DROP --predictions URI` regenerates the
data set the drop came from (deterministic), reads the predict job's committed output (submission.csv and the naive
seasonal baseline in predictions/) and prints exp-RMSPE against the hidden Sales of the drop's test.csv rows (Sales
> 0): the model, the naive baseline, the noise floor (the noise-free expected sales) and the point-in-time floor
(the expected sales as known on D, synth/point_in_time_floor.py). score_quantiles scores quantile forecasts the same
way: P10-P90 coverage and weighted quantile loss (as rossmann_jobs/metrics.py defines them), beside the exact
quantiles of the generated sales (the noise is log-normal: Sales = expected x exp(eps), eps ~ N(0, sigma^2), so the
q quantile is expected x exp(sigma z_q), rounding aside), and beside the same noise around the point-in-time
expectation: the interval of a forecast that knows all that D knows and only the noise's spread (not how far the
weather and the trend may move after D), so it shows how much of a miss is the horizon's unknowable drift.
"""
from __future__ import annotations

import datetime as dt
import io
import tempfile
from statistics import NormalDist
from typing import Sequence

import numpy as np
import pandas as pd

from rossmann_jobs.forecast.baseline import BASELINE_COL
from rossmann_jobs.metrics import coverage, exp_rmspe, quantile_loss
from rossmann_jobs.output_layout import PREDICTIONS_DIR, SUBMISSION_FILE
from rossmann_jobs.synth.point_in_time_floor import point_in_time_expected


def horizon_truth(dataset, as_of: dt.date) -> pd.DataFrame:
    """Store, Date, Sales (hidden), ExpectedSales and PointInTimeExpectedSales of every store on D+1 .. D+48."""
    grids = dataset.grids
    days, known = point_in_time_expected(grids, as_of)
    stores = np.arange(1, known.shape[1] + 1)
    return pd.DataFrame({"Date": pd.to_datetime(np.repeat(grids.calendar.dates[days], len(stores))),
                         "Store": np.tile(stores, len(days)),
                         "Sales": grids.sales[days].ravel(),
                         "ExpectedSales": grids.sales_model.expected[days].ravel(),
                         "PointInTimeExpectedSales": known.ravel()})


def score_forecast(truth: pd.DataFrame, plan: pd.DataFrame, submission: pd.DataFrame | None = None,
                   baseline: pd.DataFrame | None = None) -> dict:
    """exp-RMSPE against the hidden Sales of the plan's rows (Id, Store, Date): both floors, and the submission
    (Id, Sales) and the baseline (Id, SalesBaseline) when given; rows = the scored rows (Sales > 0)."""
    rows = plan[["Id", "Store", "Date"]].assign(Date=lambda f: pd.to_datetime(f["Date"]))
    rows = rows.merge(truth, on=["Store", "Date"], how="left", validate="one_to_one")
    if rows["Sales"].isna().any():
        raise ValueError(f"{int(rows['Sales'].isna().sum())} plan rows are outside the generated horizon")
    actual = rows["Sales"].to_numpy(float)
    result = {"noise_floor": exp_rmspe(actual, rows["ExpectedSales"].to_numpy(float)),
              "point_in_time_floor": exp_rmspe(actual, rows["PointInTimeExpectedSales"].to_numpy(float)),
              "rows": int((actual > 0).sum())}
    for name, frame, column in (("model", submission, "Sales"), ("baseline", baseline, BASELINE_COL)):
        if frame is None:
            continue
        forecast = rows[["Id"]].merge(frame[["Id", column]], on="Id", how="left")[column]
        if name == "model" and forecast.isna().any():
            raise ValueError(f"the submission lacks {int(forecast.isna().sum())} of the plan's Ids")
        result[name] = exp_rmspe(actual, forecast.fillna(0).to_numpy(float))
    return result


def score_predictions(dataset, as_of: dt.date, raw_uri: str, predictions_uri: str) -> dict:
    """score_forecast of a predict job's committed output (local or S3) for the drop at raw_uri."""
    from rossmann_jobs import storage

    attempt = storage.committed_uri(predictions_uri)
    plan = pd.read_csv(io.BytesIO(storage.read_bytes(storage.join(raw_uri, "test.csv"))),
                       usecols=["Id", "Store", "Date"])
    submission = pd.read_csv(io.BytesIO(storage.read_bytes(storage.join(attempt, SUBMISSION_FILE))))
    with tempfile.TemporaryDirectory(prefix="rossmann-score-") as local:
        rows = pd.read_parquet(storage.download_dir(storage.join(attempt, PREDICTIONS_DIR), local))
    rows = rows[rows["split"] == "test"] if "split" in rows else rows
    baseline = rows[["Id", BASELINE_COL]].dropna(subset=["Id"]).astype({"Id": int})
    return score_forecast(horizon_truth(dataset, as_of), plan, submission, baseline)


def exact_quantiles(expected: np.ndarray, sigma: float, levels: Sequence[float]) -> np.ndarray:
    """[row, level] quantiles of the generated sales: expected x exp(sigma z_q)."""
    z = np.array([NormalDist().inv_cdf(level) for level in levels])
    return np.asarray(expected, float)[:, None] * np.exp(sigma * z)[None, :]


def quantile_scores(actual: np.ndarray, quantiles: np.ndarray, levels: Sequence[float]) -> dict:
    """coverage: share of actuals in [lowest, highest quantile]; quantile_loss: per level 2 sum(pinball) /
    sum(actual), averaged over the levels (rossmann_jobs/metrics.py, as the score job scores them)."""
    return {"coverage": coverage(actual, quantiles[:, 0], quantiles[:, -1]),
            "quantile_loss": quantile_loss(actual, quantiles, levels)}


def score_quantiles(truth: pd.DataFrame, plan: pd.DataFrame, as_of: dt.date, sigma: float,
                    levels: Sequence[float], forecasts: dict[str, pd.DataFrame]) -> dict:
    """Per forecast (Id + one column per level, in order; a missing Id is forecast 0), for the exact quantiles
    ("exact") and for the noise's quantiles around the point-in-time expectation ("exact_point_in_time"):
    quantile_scores over the plan's rows with Sales > 0, overall and per lead week (1..7)."""
    rows = plan[["Id", "Store", "Date"]].assign(Date=lambda f: pd.to_datetime(f["Date"]))
    rows = rows.merge(truth, on=["Store", "Date"], how="left", validate="one_to_one")
    rows = rows[rows["Sales"] > 0]
    actual = rows["Sales"].to_numpy(float)
    week = np.clip(-(-(rows["Date"] - pd.Timestamp(as_of)).dt.days.to_numpy() // 7), 1, 7)
    values = {"exact": exact_quantiles(rows["ExpectedSales"].to_numpy(float), sigma, levels),
              "exact_point_in_time": exact_quantiles(rows["PointInTimeExpectedSales"].to_numpy(float), sigma, levels)}
    for name, frame in forecasts.items():
        columns = list(frame.columns[1:])
        values[name] = rows[["Id"]].merge(frame, on="Id", how="left")[columns].fillna(0).to_numpy(float)
    return {"levels": list(levels), "nominal_coverage": levels[-1] - levels[0], "rows": int(len(rows)),
            **{name: {**quantile_scores(actual, q, levels),
                      "by_lead_week": {int(w): quantile_scores(actual[week == w], q[week == w], levels)
                                       for w in np.unique(week)}}
               for name, q in values.items()}}
