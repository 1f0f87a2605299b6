"""Future perturbation of the quantile steps that read history: changing every value dated after what a step may
know (the trend weeks ended after a validation row's origin, the sales after D) leaves the quantiles unchanged; a
deliberately wrong step that reads one week too far is caught by the same check."""
from __future__ import annotations

from datetime import date, timedelta

import numpy as np
from pyspark.sql import functions as F

from rossmann_jobs.forecast.baseline import baseline_forecast
from rossmann_jobs.forecast.calibration import calibrate_quantiles
from rossmann_jobs.forecast.metrics import ACTUAL_COL
from rossmann_jobs.forecast.quantiles import LEAD_WEEK_COL, ORIGIN_FORECAST_COL, lead_week, trend_at_origin
from rossmann_jobs.model.broadcast import LOG_FORECAST_COL

AS_OF = date(2015, 7, 31)           # a Friday, as in the benches
LEVELS = (0.1, 0.5, 0.9)
STATES = (1, 2, 3)
HISTORY_DAYS = 160


def trend_history(spark, perturb_after: date | None):
    """State, Date, trend, trend_de of the prepared rows up to AS_OF: a row carries the value of the trend week it
    meets (ending reference_week_end(Date)), a smooth function of that week. With perturb_after, every row whose week
    ended after that day gets other values, and rows dated after AS_OF are added: what the day may not know."""
    rows = []
    for state in STATES:
        for back in range(HISTORY_DAYS):
            day = AS_OF - timedelta(days=back)
            week = (seed_week_end_of(day) - AS_OF).days
            trend, trend_de = 60.0 + 3 * state + 0.4 * week, 70.0 + 0.2 * week
            if perturb_after and seed_week_end_of(day) > perturb_after:
                trend, trend_de = trend + 17.0 * ((back % 5) + 1), trend_de - 11.0
            rows.append((state, day, trend, trend_de))
        if perturb_after:
            rows += [(state, AS_OF + timedelta(days=ahead), 99.0, 1.0) for ahead in range(1, 30)]
    return spark.createDataFrame(rows, "State int, Date date, trend double, trend_de double")


def seed_week_end_of(day: date) -> date:
    """point_in_time.reference_week_end in Python: the Saturday ending the week that starts on the Sunday ending the
    day's ISO week."""
    return day + timedelta(days=6 - day.weekday() + 6)


def validation_rows(spark, origin: date):
    """Validation rows of 3 stores (one per state) dated after origin up to AS_OF, with their own week's trend (known
    at AS_OF, not at the origin) and LeadDays from the origin; sales with a deterministic noise."""
    rng = np.random.default_rng(3)
    rows = []
    for store in STATES:
        for back in range((AS_OF - origin).days):
            day = AS_OF - timedelta(days=back)
            week = (seed_week_end_of(day) - AS_OF).days
            trend, trend_de = 60.0 + 3 * store + 0.4 * week, 70.0 + 0.2 * week
            rows.append((store, store, day, float((day - origin).days), trend, trend_de,
                         float(np.exp(model_log_sales(trend, trend_de) + rng.normal(0, 0.1)))))
    return spark.createDataFrame(rows, "StoreId int, State int, Date date, LeadDays double, trend double, "
                                       "trend_de double, SalesActual double")


def model_log_sales(trend, trend_de):
    """A stand-in for the network: log sales rise with both trends (so the origin's trend moves the forecast)."""
    return 8.0 + 0.01 * trend + 0.005 * trend_de


def calibrated(spark, origin: date, history, reach_days: int = 0) -> dict[int, list[float]]:
    """The residual quantile table calibrate_quantiles makes from the validation rows and their forecasts
    from the origin's trend; reach_days > 0 is a wrong step that takes the origin that many days later."""
    rows = validation_rows(spark, origin).withColumn(LEAD_WEEK_COL, lead_week(F.col("LeadDays")))
    plain = rows.withColumn(LOG_FORECAST_COL, model_log_sales(F.col("trend"), F.col("trend_de")))
    shifted = rows.withColumn("LeadDays", F.col("LeadDays") - reach_days)
    from_origin = (trend_at_origin(shifted, history, "LeadDays")
                   .select("StoreId", "Date", model_log_sales(F.col("trend"), F.col("trend_de"))
                           .alias(ORIGIN_FORECAST_COL)))
    table, _summary = calibrate_quantiles(plain.select("StoreId", "Date", LEAD_WEEK_COL, ACTUAL_COL,
                                                               LOG_FORECAST_COL), LEVELS, from_origin)
    return table


def test_residual_quantiles_do_not_read_trend_weeks_after_the_origin(spark):
    # A Tuesday: the week it reads ended on the Saturday before (the product's origin, D - 48, is a Saturday here).
    origin = AS_OF - timedelta(days=45)
    known = calibrated(spark, origin, trend_history(spark, None))
    assert calibrated(spark, origin, trend_history(spark, origin)) == known
    # The check can fail: taking the origin one week later reads a week that ended after the real origin.
    assert calibrated(spark, origin, trend_history(spark, origin), reach_days=7) != calibrated(
        spark, origin, trend_history(spark, None), reach_days=7)


def sales_history(spark, perturbed: bool):
    """StoreId, Date, DayOfWeek, Promo and log Sales of 2 stores over 400 days up to AS_OF; perturbed: every row
    after AS_OF, and more of them, with other sales."""
    rng = np.random.default_rng(11)
    rows = [(store, AS_OF - timedelta(days=back), (AS_OF - timedelta(days=back)).isoweekday(), back % 2,
             float(np.log(1000 * store) + rng.normal(0, 0.2))) for store in (1, 2) for back in range(400)]
    if perturbed:
        rows += [(store, AS_OF + timedelta(days=ahead), (AS_OF + timedelta(days=ahead)).isoweekday(), ahead % 2,
                  float(np.log(50.0 * ahead))) for store in (1, 2) for ahead in range(1, 20)]
    return spark.createDataFrame(rows, "StoreId int, Date date, DayOfWeek int, Promo int, Sales float")


def test_the_baseline_and_its_quantiles_do_not_read_sales_after_as_of(spark):
    horizon = spark.createDataFrame([(i, store, day, promo) for i, (store, day, promo) in
                                     enumerate((s, d, p) for s in (1, 2) for d in range(1, 8) for p in (0, 1))],
                                    "Id int, StoreId int, DayOfWeek int, Promo int")
    columns = ["B10", "B50", "B90"]

    def quantiles(history, end: date):
        return baseline_forecast(horizon, history, end, levels=LEVELS, columns=columns).orderBy("Id").toPandas()

    known = quantiles(sales_history(spark, False), AS_OF)
    assert quantiles(sales_history(spark, True), AS_OF).equals(known)
    # A window that ends one week too late reads the changed rows.
    assert not quantiles(sales_history(spark, True), AS_OF + timedelta(days=7)).equals(
        quantiles(sales_history(spark, False), AS_OF + timedelta(days=7)))
