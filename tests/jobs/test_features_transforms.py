"""Unit tests of the pure feature steps on tiny hand-made frames: elapsed days, calendar, joins, windows, encoding."""
from __future__ import annotations

import math
from datetime import date, timedelta

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from rossmann_jobs.features import date_features, encode, event_days, joins, split
from rossmann_jobs.features.raw_schemas import GOOGLE_TREND, STORE
from rossmann_jobs.features.validate import PROBLEM, problem_columns

D = date.fromisoformat
PROBLEM_TYPE = "struct<reason:string,column:string,record:string>"


def with_problem_column(df):
    return df.withColumn(PROBLEM, F.lit(None).cast(PROBLEM_TYPE))


CAP = event_days.NEAR_EVENT_DAYS


def promo_only():
    return {"Promo": F.col("Promo")}


# --- elapsed days -----------------------------------------------------------------------------------------------

def elapsed_rows(spark, rows, eligible=None):
    """rows: (Store, Date, Promo) -> {(Store, Date): (DaysToPromo, AfterPromo)}."""
    df = spark.createDataFrame(rows, "Store int, Date date, Promo boolean")
    eligible = F.lit(True) if eligible is None else eligible
    out = event_days.add_event_days(df, eligible, promo_only()).collect()
    return {(r.Store, r.Date): (r.DaysToPromo, r.AfterPromo) for r in out}


def test_elapsed_counts_days_to_next_and_since_last_event(spark):
    days = [D("2015-01-01") + timedelta(days=i) for i in range(6)]
    promo = [False, True, False, False, True, False]
    got = elapsed_rows(spark, [(1, d, p) for d, p in zip(days, promo)])
    # After: since the last event on/before the day, else since the store's first day.
    assert [got[(1, d)][1] for d in days] == [0, 0, 1, 2, 0, 1]
    # DaysTo: days to the next event on/after the day, else the cap.
    assert [got[(1, d)][0] for d in days] == [1, 0, 2, 1, 0, CAP]


def test_elapsed_first_row_of_a_store_and_a_store_without_events(spark):
    days = [D("2015-03-01") + timedelta(days=i) for i in range(4)]
    rows = [(7, d, False) for d in days] + [(8, days[2], True), (8, days[3], False)]
    got = elapsed_rows(spark, rows)
    # No event at all: After counts from the store's first day, DaysTo is the cap.
    assert [got[(7, d)] for d in days] == [(CAP, 0), (CAP, 1), (CAP, 2), (CAP, 3)]
    # Store 8 starts later: its own first day anchors it, not store 7's.
    assert got[(8, days[2])] == (0, 0) and got[(8, days[3])] == (CAP, 1)


def test_elapsed_ties_on_one_date_count_the_event_for_every_row(spark):
    day, next_day = D("2015-05-05"), D("2015-05-06")
    rows = [(1, D("2015-05-01"), False), (1, day, False), (1, day, True), (1, next_day, False)]
    out = event_days.add_event_days(spark.createDataFrame(rows, "Store int, Date date, Promo boolean"), F.lit(True),
                              promo_only()).collect()
    on_day = [(r.DaysToPromo, r.AfterPromo) for r in out if r.Date == day]
    assert on_day == [(0, 0), (0, 0)]
    assert {(r.Date, r.DaysToPromo, r.AfterPromo) for r in out if r.Date != day} == {
        (D("2015-05-01"), 4, 0), (next_day, CAP, 1)}


def test_elapsed_ignores_rows_that_are_not_eligible(spark):
    days = [D("2015-01-01") + timedelta(days=i) for i in range(4)]
    rows = [(1, days[0], False), (1, days[1], True), (1, days[2], False), (1, days[3], False)]
    df = spark.createDataFrame(rows, "Store int, Date date, Promo boolean")
    # The promo on day 1 belongs to a row that is not eligible (e.g. after as-of), so nobody sees it.
    out = event_days.add_event_days(df, F.col("Date") != F.lit(days[1]), promo_only()).collect()
    got = {r.Date: (r.DaysToPromo, r.AfterPromo) for r in out if r.Date != days[1]}
    assert got == {days[0]: (CAP, 0), days[2]: (CAP, 2), days[3]: (CAP, 3)}


def test_elapsed_uses_the_raw_event_columns_by_default(spark):
    rows = [(1, D("2015-01-01"), 0, "0", 1), (1, D("2015-01-02"), 1, "a", 0), (1, D("2015-01-03"), 0, "0", 0)]
    df = spark.createDataFrame(rows, "Store int, Date date, Promo int, StateHoliday string, SchoolHoliday int")
    out = event_days.add_event_days(df, F.lit(True)).orderBy("Date").collect()
    assert [(r.AfterPromo, r.DaysToStateHoliday, r.AfterSchoolHoliday) for r in out] == [(0, 1, 0), (0, 0, 1),
                                                                                         (1, CAP, 2)]
    assert not {"BeforePromo", "BeforeStateHoliday", "BeforeSchoolHoliday"} & set(out[0].asDict()), (
        "the reference's Before counts are not computed (spec.UNFED_BEFORE_COLS)")


def test_near_event_days_are_capped_and_the_data_end_is_not_an_event(spark):
    cap = event_days.NEAR_EVENT_DAYS
    days = [D("2015-03-01") + timedelta(days=i) for i in range(cap + 6)]
    promo_on = {1, cap + 4}          # further apart than the cap, so both sides reach it in between
    hidden = cap + 2                 # a promo on a row that is not eligible (after as-of): nobody sees it
    rows = [(1, d, i in promo_on or i == hidden) for i, d in enumerate(days)]
    df = spark.createDataFrame(rows, "Store int, Date date, Promo boolean")
    eligible = F.col("Date") != F.lit(days[hidden])
    out = {r.Date: r for r in event_days.add_event_days(df, eligible, promo_only()).collect()}
    since = [out[d].DaysSincePromo for i, d in enumerate(days) if i != hidden]
    to = [out[d].DaysToPromo for i, d in enumerate(days) if i != hidden]
    expected_since = [min(i - max((e for e in promo_on if e <= i), default=-10 ** 6), cap)
                      for i in range(len(days)) if i != hidden]
    expected_to = [min(min((e for e in promo_on if e >= i), default=10 ** 6) - i, cap)
                   for i in range(len(days)) if i != hidden]
    assert since == expected_since and to == expected_to
    assert since[0] == cap and to[0] == 1 and to[1] == 0            # no earlier event: the cap
    # After the last event the data's last day is not read as one (the reference's Before counts did).
    assert out[days[-1]].DaysToPromo == cap
    assert {type(v) for v in since + to} == {int}


def test_flag_events_treats_only_zero_as_no_event(spark):
    df = spark.createDataFrame([(0, "0", 0), (1, "a", 1), (1, "c", 0), (None, None, None)],
                               "Promo int, StateHoliday string, SchoolHoliday int")
    got = [tuple(r) for r in event_days.flag_events(df).collect()]
    assert got == [(False, False, False), (True, True, True), (True, True, False), (None, None, None)]


# --- calendar ---------------------------------------------------------------------------------------------------

def test_expand_date_uses_iso_weeks(spark):
    df = spark.createDataFrame([(D("2014-12-29"),), (D("2015-01-04"),), (D("2015-07-31"),)], "Date date")
    got = [(r.Year, r.Month, r.Week, r.Day) for r in date_features.expand_date(df).collect()]
    assert got == [(2014, 12, 1, 29), (2015, 1, 1, 4), (2015, 7, 31, 31)]


COMPETITION_SCHEMA = ("Date date, CompetitionOpenSinceYear int, CompetitionOpenSinceMonth int, Promo2SinceYear int, "
                      "Promo2SinceWeek int")


def competition_and_promo2(spark, rows):
    """The since dates are added on the store table, the day counts on each row: here both on the same rows."""
    df = spark.createDataFrame(rows, COMPETITION_SCHEMA)
    return date_features.add_competition_and_promo2(date_features.add_since_dates(df)).collect()


def test_competition_months_are_capped_at_24_and_zero_before_opening_or_when_unknown(spark):
    rows = [
        (D("2015-07-31"), 2015, 7, None, None),   # opened 2015-07-15: 16 days -> 0 months
        (D("2015-07-31"), 2015, 5, None, None),   # 2015-05-15: 77 days -> 2 months
        (D("2015-07-31"), 2010, 1, None, None),   # far back: capped at 720 days -> 24
        (D("2015-07-31"), 2016, 1, None, None),   # opens later: 0
        (D("2015-07-31"), None, None, None, None),  # unknown: year filled with 1900 -> 0
        (D("2015-07-31"), 1900, 3, None, None),   # the real file's 1900: also 0
    ]
    out = competition_and_promo2(spark, rows)
    assert [r.CompetitionMonthsOpen for r in out] == [0, 2, 24, 0, 0, 0]
    assert [r.CompetitionOpenSinceYear for r in out] == [2015, 2015, 2010, 2016, 1900, 1900]
    assert [r.Promo2SinceYear for r in out] == [1900] * 6
    assert [r.Promo2Weeks for r in out] == [0] * 6


def test_promo2_weeks_count_from_the_since_week_capped_at_25(spark):
    rows = [
        (D("2015-01-29"), None, None, 2015, 2),   # since 2015-01-08: 21 days -> 3 weeks
        (D("2015-01-29"), None, None, 2013, 10),  # long ago: 175 days cap -> 25
        (D("2015-01-29"), None, None, 2015, 40),  # in the future: 0
        (D("2015-01-29"), None, None, None, None),  # no promo2: 0
    ]
    out = competition_and_promo2(spark, rows)
    assert [r.Promo2Weeks for r in out] == [3, 25, 0, 0]


# --- joins ------------------------------------------------------------------------------------------------------

def test_trend_keys_map_ni_and_germany_and_quarantine_bad_weeks(spark):
    rows = [("Rossmann_DE", "2015-07-26 - 2015-08-01", 50), ("Rossmann_DE_NI", "2015-07-26 - 2015-08-01", 40),
            ("Rossmann_DE_BY", "2015-07-26 - 2015-08-01", 45), ("Rossmann_DE_BY", "week 31", 45)]
    trend = with_problem_column(spark.createDataFrame(rows, "file string, week string, trend int"))
    classified = joins.classify_trend(trend, GOOGLE_TREND)
    states = {(r.State, r.Year, r.Week): r.trend for r in joins.state_trend(classified).collect()}
    assert states == {("HB,NI", 2015, 30): 40, ("BY", 2015, 30): 45}
    germany = {(r.Year, r.Week): r.trend_de for r in joins.germany_trend(classified).collect()}
    assert germany == {(2015, 30): 50}
    problems = classified.filter(F.col(PROBLEM).isNotNull()).select("week", *problem_columns()).collect()
    assert [(r.week, r._reason_column) for r in problems] == [("week 31", "week")]


def test_trend_rows_that_collide_on_the_join_key_are_all_quarantined(spark):
    # 2017-01-01 and 2017-12-31 are both Sundays of ISO week 52 of year 2017: the example's key would fan out.
    rows = [("Rossmann_DE_BY", "2017-01-01 - 2017-01-07", 10), ("Rossmann_DE_BY", "2017-12-31 - 2018-01-06", 20),
            ("Rossmann_DE_BY", "2017-01-08 - 2017-01-14", 30)]
    trend = with_problem_column(spark.createDataFrame(rows, "file string, week string, trend int"))
    classified = joins.classify_trend(trend, GOOGLE_TREND)
    assert [r.trend for r in joins.state_trend(classified).collect()] == [30]
    reasons = {r._reason for r in classified.select(*problem_columns()).collect() if r._reason}
    assert reasons == {"duplicate key (State,Year,Week)"}


def test_iso_trend_keys_give_each_week_its_own_key_when_1_january_is_a_sunday(spark):
    # Strict mode keys by ISO year: 2017-01-01 is in ISO week 52 of 2016, 2017-12-31 in ISO week 52 of 2017.
    rows = [("Rossmann_DE_BY", "2017-01-01 - 2017-01-07", 10), ("Rossmann_DE_BY", "2017-12-31 - 2018-01-06", 20),
            ("Rossmann_DE", "2017-01-01 - 2017-01-07", 50), ("Rossmann_DE", "2017-12-31 - 2018-01-06", 60)]
    trend = with_problem_column(spark.createDataFrame(rows, "file string, week string, trend int"))
    classified = joins.classify_trend(trend, GOOGLE_TREND, iso_keys=True)
    assert {(r.Year, r.Week): r.trend for r in joins.state_trend(classified).collect()} == {(2016, 52): 10,
                                                                                            (2017, 52): 20}
    assert {(r.Year, r.Week): r.trend_de for r in joins.germany_trend(classified).collect()} == {(2016, 52): 50,
                                                                                                 (2017, 52): 60}
    # A sales row joins on its own ISO year and keeps its calendar Year (a feature).
    days = spark.createDataFrame([(1, D("2017-01-01")), (1, D("2017-12-25"))], "Store int, Date date")
    lookups = lookup_frames(spark)
    joined = joins.add_lookup_columns(date_features.expand_date(days), lookups[0], lookups[1],
                                      joins.state_trend(classified), joins.germany_trend(classified), lookups[4],
                                      iso_trend_keys=True)
    got = {(r.Date, r.Year): (r.trend, r.trend_de) for r in joined.collect()}
    assert got == {(D("2017-01-01"), 2017): (10, 50), (D("2017-12-25"), 2017): (20, 60)}


def sales_frame(spark, rows):
    schema = "Store int, Date date, Year int, Week int, in_scope boolean"
    return with_problem_column(spark.createDataFrame(rows, schema))


def lookup_frames(spark, stores=(1,), states=((1, "BY"),)):
    store_rows = [(s, "a", "a", 100.0, None, None, 0, None, None, None) for s in stores]
    store = with_problem_column(spark.createDataFrame(store_rows, ", ".join(
        f"{name} {'int' if kind == 'int' else 'double' if kind == 'double' else 'string'}"
        for name, kind in STORE.columns)))
    store_states = with_problem_column(spark.createDataFrame(list(states), "Store int, State string"))
    trend = spark.createDataFrame([("BY", 2015, 31, 40, True)],
                                  "State string, Year int, Week int, trend int, _has_trend boolean")
    trend_de = spark.createDataFrame([(2015, 31, 55, True)], "Year int, Week int, trend_de int, _has_trend_de boolean")
    weather_cols = ", ".join(f"{c} double" for c in joins.WEATHER_COLS if c != "Events")
    weather = spark.createDataFrame(
        [("BY", D("2015-07-31"), *[1.0] * (len(joins.WEATHER_COLS) - 1), "Rain", True)],
        f"State string, Date date, {weather_cols}, Events string, _has_weather boolean")
    return store, store_states, trend, trend_de, weather


def test_join_lookups_quarantines_misses_in_scope_and_never_changes_the_row_count(spark):
    rows = [(1, D("2015-07-31"), 2015, 31, True),    # everything found
            (2, D("2015-07-31"), 2015, 31, True),    # store 2 unknown to store.csv
            (3, D("2015-07-31"), 2015, 31, True),    # store 3 in store.csv but not in store_states.csv
            (1, D("2015-07-30"), 2015, 31, True),    # no weather that day
            (2, D("2015-07-31"), 2015, 31, False)]   # out of scope: not judged
    lookups = lookup_frames(spark, stores=(1, 3))
    joined = joins.join_lookups(sales_frame(spark, rows), *lookups, "in_scope", ["Store", "Date"])
    out = joined.select("Store", "Date", "in_scope", "trend", "trend_de", "Events", *problem_columns()).collect()
    assert len(out) == len(rows)
    reasons = {(r.Store, r.Date, r.in_scope): r._reason for r in out}
    assert reasons == {
        (1, D("2015-07-31"), True): None,
        (2, D("2015-07-31"), True): "Store not in store.csv",
        (3, D("2015-07-31"), True): "Store not in store_states.csv",
        (1, D("2015-07-30"), True): "no weather.csv row for (State, Date) via state_names.csv",
        (2, D("2015-07-31"), False): None,
    }
    found = [r for r in out if r._reason is None and r.in_scope][0]
    assert (found.trend, found.trend_de, found.Events) == (40, 55, "Rain")


# --- windows and outcomes ---------------------------------------------------------------------------------------

def test_validation_window_is_by_default_the_last_horizon_length_days_up_to_as_of():
    windows = split.plan_windows(D("2015-07-31"), D("2015-08-01"), D("2015-09-17"))
    assert (windows.validation_start, windows.validation_end) == (D("2015-06-14"), D("2015-07-31"))
    assert "out of time" in windows.validation_rule
    with pytest.raises(ValueError, match="validation window 'last-year'"):
        split.plan_windows(D("2015-07-31"), D("2015-08-01"), D("2015-09-17"), "last-year")


def test_year_earlier_validation_window_is_the_horizon_shifted_back_one_year():
    windows = split.plan_windows(D("2015-07-31"), D("2015-08-01"), D("2015-09-17"), split.YEAR_EARLIER)
    assert (windows.validation_start, windows.validation_end) == (D("2014-08-02"), D("2014-09-17"))


def test_year_earlier_validation_window_is_cut_at_as_of():
    windows = split.plan_windows(D("2014-08-20"), D("2015-08-01"), D("2015-09-17"), split.YEAR_EARLIER)
    assert (windows.validation_start, windows.validation_end) == (D("2014-08-02"), D("2014-08-20"))


def test_year_earlier_validation_window_falls_back_to_the_last_horizon_length_days_before_as_of():
    windows = split.plan_windows(D("2014-06-30"), D("2015-08-01"), D("2015-08-10"), split.YEAR_EARLIER)
    assert (windows.validation_start, windows.validation_end) == (D("2014-06-21"), D("2014-06-30"))
    assert "last 10 days" in windows.validation_rule


def test_last_train_date_is_the_day_before_a_validation_window_that_reaches_as_of_else_as_of():
    recent = split.plan_windows(D("2015-01-31"), D("2015-02-01"), D("2015-03-20"))
    assert recent.last_train_date() == D("2014-12-14") == recent.validation_start - timedelta(days=1)
    cut = split.plan_windows(D("2014-08-20"), D("2015-08-01"), D("2015-09-17"), split.YEAR_EARLIER)
    assert cut.last_train_date() == D("2014-08-01")
    year_earlier = split.plan_windows(D("2015-07-31"), D("2015-08-01"), D("2015-09-17"), split.YEAR_EARLIER)
    assert year_earlier.last_train_date() == D("2015-07-31")


def test_assign_outcome_sends_every_row_to_exactly_one_place(spark):
    windows = split.plan_windows(D("2015-07-31"), D("2015-08-01"), D("2015-08-14"))
    rows = [("train", D("2015-08-02"), 100, None), ("test", D("2015-07-30"), None, None),
            ("train", D("2015-07-01"), 0, None), ("train", D("2015-07-20"), 100, None),
            ("train", D("2015-07-01"), 100, None), ("test", D("2015-08-02"), None, None),
            ("train", D("2015-07-01"), None, "bad")]
    df = spark.createDataFrame(rows, "_source string, Date date, Sales int, bad string")
    df = (df.withColumn("Store", F.lit(1)).withColumn(split.IN_SCOPE, split.in_scope(windows.as_of))
          .withColumn(PROBLEM, F.when(F.col("bad").isNotNull(), F.struct(
              F.lit("x").alias("reason"), F.lit("y").alias("column"), F.lit("z").alias("record")))))
    got = [r[split.OUTCOME] for r in split.assign_outcome(df, windows, None, 1).collect()]
    assert got == [split.AFTER_AS_OF, split.NOT_AFTER_AS_OF, split.ZERO_SALES, split.VALIDATION, split.TRAIN,
                   split.TEST, split.QUARANTINED]


def test_sample_is_deterministic_and_close_to_the_rate(spark):
    df = spark.range(20000).select((F.col("id") % 1000).cast("int").alias("Store"),
                                   F.date_add(F.lit(D("2013-01-01")), (F.col("id") / 1000).cast("int")).alias("Date"))
    picked = df.filter(split.sampled(0.25, seed=3))
    first = {(r.Store, r.Date) for r in picked.collect()}
    again = {(r.Store, r.Date) for r in df.repartition(7).filter(split.sampled(0.25, seed=3)).collect()}
    assert first == again
    assert abs(len(first) / 20000 - 0.25) < 0.02
    other_seed = {(r.Store, r.Date) for r in df.filter(split.sampled(0.25, seed=4)).collect()}
    assert other_seed != first


# --- encoding ---------------------------------------------------------------------------------------------------

def test_vocabularies_are_sorted_known_values_and_unknown_or_null_encode_to_zero(spark):
    value_sets = {col: [] for col in encode.CATEGORICAL_COLS}
    value_sets.update({"StoreType": ["c", "a"], "Promo": [True, False], "Store": [10, 2]})
    vocabularies = encode.sorted_vocabularies(value_sets)
    assert vocabularies["StoreType"] == ["a", "c"] and vocabularies["Store"] == [2, 10]
    assert encode.vocab_sizes(vocabularies)["StoreType"] == 3

    columns = {c: None for c in encode.FEATURE_COLS}
    rows = [{**columns, "Store": 10, "StoreType": "c", "Promo": False, "CompetitionDistance": 5.5},
            {**columns, "Store": 2, "StoreType": "z", "Promo": True, "CompetitionDistance": None},
            {**columns, "Store": 5, "StoreType": "a", "Promo": None, "CompetitionDistance": 1.0},    # inside the range
            {**columns, "Store": 11, "StoreType": None, "Promo": True, "CompetitionDistance": 2.0},   # above it
            {**columns, "Store": None, "StoreType": "a", "Promo": True, "CompetitionDistance": 3.0}]
    schema = T.StructType(
        [T.StructField("Store", T.IntegerType()), T.StructField("StoreType", T.StringType()),
         T.StructField("Promo", T.BooleanType())]
        + [T.StructField(c, T.StringType()) for c in encode.CATEGORICAL_COLS
           if c not in ("Store", "StoreType", "Promo")]
        + [T.StructField(c, T.DoubleType()) for c in encode.CONTINUOUS_COLS])
    df = spark.createDataFrame([tuple(r[f.name] for f in schema.fields) for r in rows], schema)
    encoded = encode.encode_features(df, vocabularies)
    got = [(r.StoreId, r.Store, r.StoreType, r.Promo, r.Events, r.CompetitionDistance) for r in encoded.collect()]
    assert got == [(10, 2, 2, 1, 0, 5.5), (2, 1, 0, 2, 0, 0.0), (5, 0, 1, 0, 0, 1.0), (11, 0, 0, 2, 0, 2.0),
                   (None, 0, 1, 2, 0, 3.0)]
    types = dict(encoded.dtypes)
    assert {types[c] for c in encode.CATEGORICAL_COLS} == {"int"}
    assert {types[c] for c in encode.CONTINUOUS_COLS} == {"float"}


def test_large_vocabularies_are_arrays_for_integers_and_joins_for_strings(spark):
    value_sets = {col: [] for col in encode.CATEGORICAL_COLS}
    value_sets.update({"Store": [1000 + 3 * i for i in range(500)], "Events": [f"e{i:03d}" for i in range(100)]})
    vocabularies = encode.sorted_vocabularies(value_sets)
    schema = T.StructType([T.StructField(c, T.IntegerType() if c == "Store" else T.StringType())
                           for c in encode.CATEGORICAL_COLS] + [T.StructField(c, T.DoubleType())
                                                                 for c in encode.CONTINUOUS_COLS])
    rows = [(1003, "e042"), (1004, "e100"), (2497, "e099"), (999, None)]
    df = spark.createDataFrame([tuple({"Store": s, "Events": e}.get(f.name) for f in schema.fields)
                                for s, e in rows], schema)
    got = [(r.StoreId, r.Store, r.Events) for r in encode.encode_features(df, vocabularies).collect()]
    assert sorted(got) == [(999, 0, 0), (1003, 2, 43), (1004, 0, 0), (2497, 500, 100)]


def test_a_vocabulary_of_consecutive_integers_encodes_by_offset(spark):
    value_sets = {col: [] for col in encode.CATEGORICAL_COLS}
    value_sets.update({"DaysToStateHoliday": list(range(event_days.NEAR_EVENT_DAYS, -1, -1)), "Month": [3, 4, 6]})
    vocabularies = encode.sorted_vocabularies(value_sets)
    schema = T.StructType([T.StructField(c, T.IntegerType() if c in ("DaysToStateHoliday", "Month") else
                                         T.StringType()) for c in encode.CATEGORICAL_COLS]
                          + [T.StructField(c, T.DoubleType()) for c in encode.CONTINUOUS_COLS])
    cap = event_days.NEAR_EVENT_DAYS
    rows = [(0, 3), (cap, 4), (cap + 1, 5), (-1, 6), (None, 7)]
    df = spark.createDataFrame([tuple({"DaysToStateHoliday": d, "Month": m}.get(f.name) for f in schema.fields)
                                for d, m in rows], schema)
    got = [(r.DaysToStateHoliday, r.Month) for r in encode.encode_features(df, vocabularies).collect()]
    # 0 .. cap are indices 1 .. cap + 1; outside the range or null: unknown. Month [3, 4, 6] has a gap: its array.
    assert got == [(1, 1), (cap + 1, 2), (0, 0), (0, 3), (0, 0)]


def year_week_rows(spark, rows):
    """Feature rows of store 1 with the given (Year, Week) pairs: integer Year, Week and Store, other columns null."""
    schema = T.StructType([T.StructField(c, T.IntegerType() if c in ("Year", "Week", "Store") else T.StringType())
                           for c in encode.CATEGORICAL_COLS] + [T.StructField(c, T.DoubleType())
                                                                 for c in encode.CONTINUOUS_COLS])
    return spark.createDataFrame([tuple({"Year": y, "Week": w, "Store": 1}.get(f.name) for f in schema.fields)
                                  for y, w in rows], schema)


def test_a_year_later_than_the_train_splits_last_is_encoded_as_that_year(spark):
    """As of 2015-01-31 the train split ends on 2014-12-14: the validation window's and the horizon's 2015 has no
    train row, so it takes 2014's index, never an untrained one; earlier years and other columns are untouched."""
    value_sets = {col: [] for col in encode.CATEGORICAL_COLS}
    value_sets.update({"Year": [2015, 2013, 2014], "Week": [52, 1, 5], "Store": [1, 2]})
    last_train = split.plan_windows(D("2015-01-31"), D("2015-02-01"), D("2015-03-20")).last_train_date()
    vocabularies, later = encode.trained_vocabularies(encode.sorted_vocabularies(value_sets), D("2013-01-01"),
                                                      last_train)
    assert vocabularies["Year"] == [2013, 2014] and vocabularies["Week"] == [1, 5, 52]
    assert later == {"Year": [2015], "Week": []}
    assert encode.vocab_sizes(vocabularies)["Year"] == 3
    df = year_week_rows(spark, [(2013, 1), (2014, 52), (2015, 5), (2016, 53), (2012, 1), (None, 1)])
    got = [(r.Year, r.Week) for r in encode.encode_features(df, vocabularies, later).collect()]
    # 2016 is no vocabulary row's value (every validation and horizon row is one): unknown, as before.
    assert got == [(1, 1), (2, 3), (2, 2), (0, 0), (0, 1), (0, 1)]
    # Through the literal map, as for a vocabulary too wide for an array: the same indices.
    wide = {**vocabularies, "Year": [-100_000, 2013, 2014]}
    assert [r.Year for r in encode.encode_features(df, wide, later).collect()] == [2, 3, 3, 0, 0, 0]


@pytest.mark.parametrize("first, last_train, week_53_trained", [
    (D("2013-01-01"), D("2015-12-27"), False),   # 2015's week 53 starts on Monday 28 December
    (D("2013-01-01"), D("2015-12-28"), True),
    (D("2016-01-03"), D("2016-05-01"), True),    # 3 January 2016 is the last day of 2015's week 53
    (D("2016-01-04"), D("2016-05-01"), False),
    (D("2024-03-01"), D("2026-10-10"), False),   # as of today's forecasts: 2026's week 53 lies ahead
    (D("2019-03-01"), D("2026-10-10"), True),    # a history back to 2020's
])
def test_iso_week_53_counts_as_trained_only_if_the_train_range_holds_one_of_its_days(first, last_train,
                                                                                    week_53_trained):
    assert [year for year in range(2009, 2031) if encode.has_iso_week_53(year)] == [2009, 2015, 2020, 2026]
    assert encode.last_trained_values(first, last_train) == {"Year": last_train.year,
                                                               "Week": 53 if week_53_trained else 52}


def test_an_untrained_week_53_is_encoded_as_week_52(spark):
    """As of 2026-11-27 (a 53-week year) the horizon's 28 December .. 3 January are ISO week 53, which a history from
    2024 holds no train row of: they take week 52's index, not an untrained embedding row."""
    value_sets = {col: [] for col in encode.CATEGORICAL_COLS}
    value_sets.update({"Year": [2024, 2025, 2026, 2027], "Week": list(range(1, 54)), "Store": [1]})
    windows = split.plan_windows(D("2026-11-27"), D("2026-11-28"), D("2027-01-14"))
    vocabularies, later = encode.trained_vocabularies(encode.sorted_vocabularies(value_sets), D("2024-03-01"),
                                                      windows.last_train_date())
    assert vocabularies["Week"] == list(range(1, 53)) and later["Week"] == [53]
    assert later["Year"] == [2027] and encode.vocab_sizes(vocabularies)["Week"] == 53
    df = year_week_rows(spark, [(2026, 52), (2026, 53), (2027, 53), (2027, 1)])
    assert [(r.Year, r.Week) for r in encode.encode_features(df, vocabularies, later).collect()] == [
        (3, 52), (3, 52), (3, 52), (3, 1)]
    # With 2020's week 53 in the train range, week 53 keeps its own index.
    trained, none_later = encode.trained_vocabularies(encode.sorted_vocabularies(value_sets), D("2019-03-01"),
                                                      windows.last_train_date())
    assert trained["Week"] == list(range(1, 54)) and none_later["Week"] == []


def test_encoded_split_keeps_one_outcome_and_its_columns_with_the_log_label(spark):
    columns = ["_outcome", "Id", "StoreId", "Date", "Open", "Sales", *encode.FEATURE_COLS]
    rows = [("train", None, 1, D("2015-07-31"), 1, 5263, *[0] * len(encode.FEATURE_COLS)),
            ("zero_sales", None, 1, D("2015-07-30"), 0, 0, *[0] * len(encode.FEATURE_COLS)),
            ("test", 7, 1, D("2015-08-01"), None, None, *[0] * len(encode.FEATURE_COLS))]
    df = spark.createDataFrame(rows, columns)
    train = encode.encoded_split(df, "train")
    assert train.columns == encode.SPLIT_COLUMNS["train"]
    assert [(r.Date, r.Sales) for r in train.collect()] == [(D("2015-07-31"), pytest.approx(math.log(5263)))]
    assert dict(train.dtypes)["Sales"] == "float"
    test = encode.encoded_split(df, "test")
    assert test.columns == encode.SPLIT_COLUMNS["test"] and "Sales" not in test.columns
    assert [(r.Id, r.Open) for r in test.collect()] == [(7, None)]
