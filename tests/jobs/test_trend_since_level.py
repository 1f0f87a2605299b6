"""The trend's move since the levels' window (features/trend_since_level.py): a hand-made case, checked against a
brute-force mean over the 144 days up to each row's origin, and blind to trend weeks after the origin."""
from __future__ import annotations

from datetime import date, timedelta

import pytest

from rossmann_jobs.features.trend_since_level import add_trend_since_level

AS_OF = date(2015, 6, 30)
FIRST, LAST = date(2014, 1, 1), date(2015, 8, 15)
DAYS = [FIRST + timedelta(days=i) for i in range((LAST - FIRST).days + 1)]


def iso_key(day: date) -> tuple[int, int]:
    year, week, _ = day.isocalendar()
    return year, week


def weekly_trend(state: str, day: date) -> float:
    """A trend that climbs week by week (so each window has its own mean), higher in BE than in HH."""
    year, week = iso_key(day)
    return (40.0 if state == "BE" else 20.0) + (year - 2014) * 52 + week


def tables(spark, change_after: date | None = None):
    """The state and Germany join tables (iso keys); change_after: every week that starts after it is set to 99."""
    weeks = sorted({iso_key(day): day for day in reversed(DAYS)}.items())   # key -> the week's first day in DAYS

    def value(state: str, key, first_day: date) -> float:
        return 99.0 if change_after and first_day > change_after else weekly_trend(state, first_day)

    state = spark.createDataFrame([(s, y, w, value(s, (y, w), d)) for s in ("BE", "HH") for (y, w), d in weeks],
                                  "State string, Year int, Week int, trend double")
    germany = spark.createDataFrame([(y, w, value("DE", (y, w), d) / 2) for (y, w), d in weeks],
                                    "Year int, Week int, trend_de double")
    return state, germany


def origin_of(day: date) -> date:
    """The row's origin as recent_level.py sets it: D for the horizon, else the end of the next older 48-day block."""
    if day > AS_OF:
        return AS_OF
    return AS_OF - timedelta(days=48 * ((AS_OF - day).days // 48 + 1))


def expected_ratio(state: str, day: date) -> float:
    origin = origin_of(day)
    window = [origin - timedelta(days=i) for i in range(144)]
    known = [weekly_trend(state, d) for d in window if d >= FIRST]
    return weekly_trend(state, day) / (sum(known) / len(known))


ROWS = [("BE", date(2015, 6, 29)), ("HH", date(2015, 6, 29)), ("BE", date(2015, 3, 3)),
        ("BE", date(2015, 7, 20)), ("HH", date(2015, 8, 10)), ("BE", date(2014, 1, 3))]


def with_ratios(spark, state_table, germany_table):
    rows = spark.createDataFrame([(i, s, d, weekly_trend(s, d), weekly_trend("DE", d) / 2)
                                  for i, (s, d) in enumerate(ROWS)],
                                 "Id int, State string, Date date, trend double, trend_de double")
    out = add_trend_since_level(rows, state_table, germany_table, AS_OF, iso_trend_keys=True)
    return out.orderBy("Id").toPandas()


def test_the_ratio_is_the_rows_trend_over_its_mean_in_the_144_days_up_to_its_origin(spark):
    out = with_ratios(spark, *tables(spark))
    for row, (state, day) in zip(out.itertuples(), ROWS):
        if origin_of(day) < FIRST:      # the store's first block: no trend known before its origin
            assert (row.TrendSinceLevel, row.TrendDeSinceLevel) == (1.0, 1.0)
            continue
        assert row.TrendSinceLevel == pytest.approx(expected_ratio(state, day), rel=1e-6), (state, day)
        assert row.TrendDeSinceLevel == pytest.approx(expected_ratio("DE", day), rel=1e-6), (state, day)
    # The climbing trend: the horizon rows are well above their window's mean, and further with the lead.
    horizon = out[out["Date"] > AS_OF]
    assert (horizon["TrendSinceLevel"] > 1.05).all()
    assert str(out["TrendSinceLevel"].dtype) == "float32"


def test_the_means_read_no_trend_week_after_the_rows_origin(spark):
    """Every week starting after D changed: the ratios of rows dated up to D (their origins and windows are before
    D) and the horizon rows' means stay; the check can fail (a week starting after an older origin moves it)."""
    known = with_ratios(spark, *tables(spark))
    state, germany = tables(spark, change_after=AS_OF)
    changed = with_ratios(spark, state, germany)
    for column in ("TrendSinceLevel", "TrendDeSinceLevel"):
        assert changed[column].tolist() == known[column].tolist()
    earlier = with_ratios(spark, *tables(spark, change_after=date(2015, 1, 1)))
    assert earlier.loc[0, "TrendSinceLevel"] != known.loc[0, "TrendSinceLevel"]
