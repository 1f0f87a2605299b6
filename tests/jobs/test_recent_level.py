"""Origin features (features/recent_level.py): lead days and recent store levels, each from sales up to the row's
forecast origin only, checked against pandas and by perturbing every sale after a row's origin."""
from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from rossmann_jobs.features import recent_level
from rossmann_jobs.features.recent_level import (
    DAY_PROMO_LEVEL_COL,
    LEAD_COL,
    LEVEL_BLOCKS,
    LEVEL_COLS,
    ORIGIN_BLOCK_DAYS,
    TAIL_DAYS,
    TAIL_LEVEL_COL,
)
from rossmann_jobs.features.spec import ORIGIN_COLS

AS_OF = date(2015, 7, 31)
DAYS = 600


def sales_frame(seed: int = 0, stores: int = 3) -> pd.DataFrame:
    """Daily rows of a few stores up to AS_OF with a store-specific trend, plus a 10-day horizon."""
    rng = np.random.default_rng(seed)
    rows = []
    for store in range(1, stores + 1):
        for offset in range(-10, DAYS):
            day = AS_OF - timedelta(days=offset)
            horizon = day > AS_OF
            sales = None if horizon else int(1000 * store * np.exp(0.002 * store * (DAYS - offset)
                                                                    + rng.normal(0, 0.1)))
            rows.append({"Store": store, "Date": day, "DayOfWeek": day.isoweekday(), "Promo": int(day.day % 3 == 0),
                         "Sales": sales, "Source": "test" if horizon else "train"})
    return pd.DataFrame(rows)


def origin_features(spark, frame: pd.DataFrame, as_of: date = AS_OF) -> pd.DataFrame:
    records = [(int(r.Store), r.Date, int(r.DayOfWeek), int(r.Promo), None if pd.isna(r.Sales) else int(r.Sales),
                r.Source) for r in frame.itertuples()]
    rows = spark.createDataFrame(records, "Store int, Date date, DayOfWeek int, Promo int, Sales int, Source string")
    history = (F.col("Source") == "train") & (F.col("Sales") > 0)
    out = recent_level.add_origin_features(rows, as_of, history).toPandas()
    return out.sort_values(["Store", "Date"]).reset_index(drop=True)


def in_christmas_season(dates: pd.Series) -> pd.Series:
    """1 December .. 6 January, as the levels' rule has it (recent_level.in_christmas_season)."""
    return dates.map(lambda day: day.month == 12 or (day.month == 1 and day.day <= 6))


@pytest.fixture(scope="module")
def base(spark):
    frame = sales_frame()
    return frame, origin_features(spark, frame)


def origin_of(day: date) -> date:
    """The forecast origin the contract gives a day: D for the horizon, else the end of the next older block."""
    if day > AS_OF:
        return AS_OF
    block = (AS_OF - day).days // ORIGIN_BLOCK_DAYS
    return AS_OF - timedelta(days=ORIGIN_BLOCK_DAYS * (block + 1))


def test_the_lead_day_runs_from_1_to_48_from_each_rows_origin(base):
    _frame, out = base
    assert set(out.columns) >= set(ORIGIN_COLS)
    expected = [(day - origin_of(day)).days for day in out["Date"]]
    assert out[LEAD_COL].tolist() == expected
    assert out[LEAD_COL].between(1, ORIGIN_BLOCK_DAYS).all()
    at = dict(zip(out["Date"], out[LEAD_COL]))
    assert (at[AS_OF], at[AS_OF - timedelta(days=47)], at[AS_OF - timedelta(days=48)],
            at[AS_OF + timedelta(days=1)]) == (48, 1, 48, 1)


def test_levels_are_the_mean_log_sales_of_the_windows_ending_at_the_origin(base):
    frame, out = base
    history = frame[frame["Sales"].notna() & ~in_christmas_season(frame["Date"])]
    checked = 0
    for _, row in out.sample(60, random_state=1).iterrows():
        origin = origin_of(row["Date"])
        store = history[(history["Store"] == row["Store"]) & (history["Date"] <= origin)]
        windows = [(TAIL_LEVEL_COL, TAIL_DAYS), *[(name, ORIGIN_BLOCK_DAYS * blocks)
                                                  for name, blocks in zip(LEVEL_COLS, LEVEL_BLOCKS)]]
        for name, days in windows:
            window = store[store["Date"] > origin - timedelta(days=days)]
            if len(window):
                assert row[name] == pytest.approx(np.log(window["Sales"]).mean(), rel=1e-6), (name, row["Date"])
                checked += 1
        cell = store[(store["Date"] > origin - timedelta(days=ORIGIN_BLOCK_DAYS * recent_level.DAY_PROMO_BLOCKS))
                     & (store["DayOfWeek"] == row["DayOfWeek"]) & (store["Promo"] == row["Promo"])]
        if len(cell):
            assert row[DAY_PROMO_LEVEL_COL] == pytest.approx(np.log(cell["Sales"]).mean(), rel=1e-6)
    assert checked > 100


def test_a_growing_store_is_seen_at_its_recent_level_not_its_average(base):
    _frame, out = base
    horizon = out[(out["Date"] > AS_OF) & (out["Store"] == 3)].iloc[0]
    # Store 3 grows 0.6 % a day: the last 48 days sit well above the last 384 days' mean, the last 14 above both.
    assert horizon["StoreLevel48d"] > horizon["StoreLevel384d"] + 0.5
    assert horizon["StoreLevel14d"] > horizon["StoreLevel48d"]


def test_no_origin_feature_reads_a_sale_dated_after_the_rows_origin(spark, base):
    frame, out = base
    cut = AS_OF - timedelta(days=3 * ORIGIN_BLOCK_DAYS)
    changed = frame.copy()
    later = changed["Date"] > cut
    changed.loc[later & changed["Sales"].notna(), "Sales"] *= 7
    changed_out = origin_features(spark, changed)
    origins = out["Date"].map(origin_of)
    # A row whose origin has no sale before it outside the Christmas season (each store's oldest blocks: the frame
    # starts in December) takes the store's mean up to D: known on D, so the forecast stays point in time, but not
    # known at that origin; every other row reads up to its origin.
    first_counted = frame.loc[~in_christmas_season(frame["Date"]), "Date"].min()
    rows_before = (origins <= cut) & (origins >= first_counted)
    assert rows_before.sum() > 500
    pd.testing.assert_frame_equal(out.loc[rows_before, ORIGIN_COLS], changed_out.loc[rows_before, ORIGIN_COLS])
    # The perturbation reaches the features of the rows whose origin is after it.
    assert (out.loc[~rows_before, TAIL_LEVEL_COL] != changed_out.loc[~rows_before, TAIL_LEVEL_COL]).all()


def test_a_store_without_recent_sales_falls_back_to_longer_windows_then_its_mean(spark):
    frame = sales_frame(stores=1)
    gap = (frame["Date"] > AS_OF - timedelta(days=60)) & (frame["Source"] == "train")
    frame.loc[gap, "Sales"] = 0          # closed for the last 60 days: no sale in the last block
    out = origin_features(spark, frame)
    horizon = out[out["Date"] > AS_OF].iloc[0]
    assert horizon["StoreLevel14d"] == horizon["StoreLevel48d"] == horizon["StoreLevel144d"]
    first = out[out["Date"] == out["Date"].min()].iloc[0]     # the oldest block has no history at all
    history = frame[(frame["Sales"] > 0) & ~in_christmas_season(frame["Date"])]
    assert first["StoreLevel384d"] == pytest.approx(np.log(history["Sales"]).mean(), rel=1e-6)
    assert first[DAY_PROMO_LEVEL_COL] == first["StoreLevel384d"]
    assert not out[ORIGIN_COLS].isna().any().any()


def test_sales_in_the_christmas_season_do_not_move_any_level(spark, base):
    frame, out = base
    season = in_christmas_season(frame["Date"]) & frame["Sales"].notna()
    assert season.sum() > 50
    changed = frame.copy()
    changed.loc[season, "Sales"] *= 3            # a Christmas rush three times the usual
    pd.testing.assert_frame_equal(out[ORIGIN_COLS], origin_features(spark, changed)[ORIGIN_COLS])
    # The same rush outside the season (a November three times as high) moves the levels whose windows hold it.
    november = frame.copy()
    november.loc[(november["Date"].map(lambda day: day.month) == 11) & november["Sales"].notna(), "Sales"] *= 3
    assert (out["StoreLevel144d"] != origin_features(spark, november)["StoreLevel144d"]).any()


def test_a_store_that_sold_only_in_the_season_takes_its_mean_over_the_season(spark):
    as_of = date(2014, 12, 20)
    days = [as_of - timedelta(days=offset) for offset in range(-5, 20)]    # opened 1 December, a 5-day horizon
    frame = pd.DataFrame([{"Store": 1, "Date": day, "DayOfWeek": day.isoweekday(), "Promo": 0,
                           "Sales": None if day > as_of else 2000 + 10 * day.day,
                           "Source": "test" if day > as_of else "train"} for day in days])
    out = origin_features(spark, frame, as_of)
    sold = frame[frame["Sales"].notna()]
    horizon = out[out["Date"] > as_of]
    assert len(horizon) == 5
    assert horizon["StoreLevel14d"].tolist() == pytest.approx([np.log(sold["Sales"]).mean()] * 5, rel=1e-6)
    assert not out[ORIGIN_COLS].isna().any().any()
