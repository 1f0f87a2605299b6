"""Strict point in time: no prepared feature depends on a value dated after as-of; the reference mode time-travels."""
from __future__ import annotations

import math
from datetime import date, timedelta

import pandas as pd
import pytest
from pyspark.sql import functions as F

from point_in_time_drops import AS_OF, SPLITS, week_end_of
from rossmann_jobs.features import joins, point_in_time
from rossmann_jobs.features.date_features import expand_date
from rossmann_jobs.features.event_days import NEAR_EVENT_DAYS
from rossmann_jobs.features.pipeline import Lookups, lookup_tables, trend_tables_known_at
from rossmann_jobs.features.raw_schemas import DATE, DOUBLE, GOOGLE_TREND, WEATHER
from rossmann_jobs.features.spec import CATEGORICAL_COLS, FEATURE_COLS, ORIGIN_COLS, UNFED_BEFORE_COLS
from rossmann_jobs.features.validate import PROBLEM

D = date.fromisoformat
PROBLEM_TYPE = "struct<reason:string,column:string,record:string>"


def with_problem_column(df):
    return df.withColumn(PROBLEM, F.lit(None).cast(PROBLEM_TYPE))


def plan_frame(spark, *days: date):
    """Parsed test.csv rows as lookup_tables reads them: only their Date matters."""
    return with_problem_column(spark.createDataFrame([(day,) for day in days], "Date date"))


# --- trend: the last complete week ------------------------------------------------------------------------------

TREND_AS_OF = D("2015-07-15")   # a Wednesday: the week 07-12 .. 07-18 straddles it
SUNDAYS = [D("2015-06-28") + timedelta(days=7 * i) for i in range(4)]   # weeks ending 07-04, 07-11, 07-18, 07-25


def trend_rows(spark, rows):
    raw = spark.createDataFrame([(file, f"{sunday} - {sunday + timedelta(days=6)}", value)
                                 for file, sunday, value in rows], "file string, week string, trend int")
    return joins.classify_trend(with_problem_column(raw), GOOGLE_TREND, cutoff=TREND_AS_OF)


def trend_of_days(spark, table, keys, value, state_days):
    """{(State, Date): value} for sales days looked up by the reference's key (Year, ISO Week of the day)."""
    days = expand_date(spark.createDataFrame(state_days, "State string, Date date"))
    return {(r.State, r.Date): r[value] for r in days.join(table, [*keys, "Year", "Week"], "left").collect()}


def strict_trend_tables(spark, rows, plan_end=D("2015-07-22")):
    """The state and Germany trend tables known at TREND_AS_OF, as pipeline.lookup_tables builds them."""
    days = point_in_time.covered_days(plan_frame(spark, plan_end), TREND_AS_OF)
    return trend_tables_known_at(trend_rows(spark, rows), days, TREND_AS_OF)


def test_weeks_ending_after_as_of_are_flagged_and_the_rest_are_not(spark):
    rows = [("Rossmann_DE_BY", sunday, 10 + i) for i, sunday in enumerate(SUNDAYS)]
    flags = {r.Date: r[point_in_time.AFTER_AS_OF] for r in trend_rows(spark, rows).collect()}
    # Saturday end <= as-of is usable; the week straddling as-of (ends 07-18) is not.
    assert flags == {SUNDAYS[0]: False, SUNDAYS[1]: False, SUNDAYS[2]: True, SUNDAYS[3]: True}


def test_a_week_not_complete_at_as_of_falls_back_to_the_last_complete_week(spark):
    rows = [(f"Rossmann_DE{suffix}", sunday, base + i) for suffix, base in (("_BY", 10), ("", 50))
            for i, sunday in enumerate(SUNDAYS)]
    state, germany = strict_trend_tables(spark, rows)
    # The reference's week of a day starts on the Sunday that ends the day's ISO week (Monday .. Sunday).
    days = [D("2015-06-24"),   # Wednesday: seed week 06-28 .. 07-04, complete at as-of: its own value (10)
            D("2015-07-05"),   # Sunday: seed week 07-05 .. 07-11, complete: its own value (11)
            D("2015-07-08"),   # Wednesday: seed week 07-12 .. 07-18 ends after as-of -> last complete week (11)
            D("2015-07-15"),   # as-of itself: seed week 07-19 .. 07-25 -> 11
            D("2015-07-21")]   # a horizon day: seed week 07-26 .. (not in the file) -> 11
    got = trend_of_days(spark, state, ["State"], "trend", [("BY", day) for day in days])
    assert [got[("BY", day)] for day in days] == [10, 11, 11, 11, 11]
    got_de = trend_of_days(spark, germany, [], "trend_de", [("BY", day) for day in days])
    assert [got_de[("BY", day)] for day in days] == [50, 51, 51, 51, 51]
    # The reference meets the weeks that end after as-of (12, 13) for the last days.
    seed = trend_of_days(spark, joins.state_trend(trend_rows(spark, rows)), ["State"], "trend",
                         [("BY", day) for day in days])
    assert [seed[("BY", day)] for day in days] == [10, 11, 12, 13, None]


def test_fallback_does_not_depend_on_weeks_after_as_of_nor_hide_a_missing_complete_week(spark):
    full = [("Rossmann_DE_BY", sunday, 10 + i) for i, sunday in enumerate(SUNDAYS)]
    full += [("Rossmann_DE", sunday, 50 + i) for i, sunday in enumerate(SUNDAYS)]
    # A realistic drop holds no week ending after as-of, and here also lacks BY's complete week of 06-28.
    realistic = [row for row in full if row[1] <= SUNDAYS[1] and row[1:] != (SUNDAYS[0], 10)]
    realistic_full = [row for row in full if row[1] <= SUNDAYS[1]]
    days = [("BY", D("2015-06-24")), ("BY", D("2015-07-14")), ("BY", D("2015-08-03"))]
    got = {}
    for name, rows in (("full", full), ("realistic", realistic_full), ("gap", realistic)):
        state, _germany = strict_trend_tables(spark, rows, plan_end=D("2015-08-03"))
        got[name] = trend_of_days(spark, state, ["State"], "trend", days)
    assert got["full"] == got["realistic"] == {("BY", D("2015-06-24")): 10, ("BY", D("2015-07-14")): 11,
                                               ("BY", D("2015-08-03")): 11}
    # The week of 06-28 ended before as-of: its absence stays a lookup miss (the row is quarantined).
    assert got["gap"][("BY", D("2015-06-24"))] is None


def test_a_state_without_a_complete_week_gets_no_fallback(spark):
    rows = [("Rossmann_DE_BY", SUNDAYS[2], 12), ("Rossmann_DE_BY", SUNDAYS[3], 13)]
    state, germany = strict_trend_tables(spark, rows)
    assert state.count() == 0 and germany.count() == 0


def test_seed_mode_flags_nothing_and_keeps_the_seed_tables(spark):
    raw = spark.createDataFrame([("Rossmann_DE_BY", f"{SUNDAYS[3]} - {SUNDAYS[3] + timedelta(days=6)}", 13)],
                                "file string, week string, trend int")
    classified = joins.classify_trend(with_problem_column(raw), GOOGLE_TREND)
    assert [r[point_in_time.AFTER_AS_OF] for r in classified.collect()] == [False]
    lookups = Lookups(None, None, classified, classified_weather(spark, []))
    state, _germany, _weather = lookup_tables(lookups, TREND_AS_OF, plan_frame(spark, D("2015-08-01")),
                                              point_in_time.REFERENCE)
    assert [(r.Year, r.Week, r.trend) for r in state.collect()] == [(2015, 29, 13)]


def seasonal_rows(ramp_per_week: float, level_2015: float = 1.0, after_as_of: int = 0):
    """Weekly rows of BY and Germany from 2013-06-30 to 2015-07-25 whose log rises by ramp_per_week through each
    summer (June to September, linear in the day of the year, from 60 on 1 June), times level_2015 in 2015;
    after_as_of is added to the weeks that end after TREND_AS_OF."""
    rows = []
    for file in ("Rossmann_DE_BY", "Rossmann_DE"):
        sunday = D("2013-06-30")
        while sunday <= D("2015-07-19"):
            weeks_into_summer = (sunday - D(f"{sunday.year}-06-01")).days / 7
            value = 60 * (level_2015 if sunday.year == 2015 else 1.0) * math.exp(ramp_per_week * weeks_into_summer)
            late = sunday + timedelta(days=6) > TREND_AS_OF
            rows.append((file, sunday, round(value) + (after_as_of if late else 0)))
            sunday += timedelta(days=7)
    return rows


def test_seasonal_drift_pools_the_series_of_earlier_years_and_persists_without_them():
    """Two series, two earlier years: the week four weeks on was 10 % (one series) and 30 % (the other) above the
    week, the neighbours alike: the drift is the pooled mean log change. No earlier year, or only one of the two
    weeks in it: 0 (persistence)."""
    start = D("2015-07-05")
    weeks = []
    for years in (1, 2):
        base = start - timedelta(days=364 * years)
        for offset in (-7, 0, 7):
            for low, high in ((50.0, 55.0), (40.0, 52.0)):
                weeks += [(base + timedelta(days=offset), low), (base + timedelta(days=28 + offset), high)]
    first_year = start - timedelta(days=728)
    drift, alone, none = point_in_time.seasonal_drift(weeks, [(start, start + timedelta(days=28)),
                                                              (start, start + timedelta(days=70)),
                                                              (first_year, first_year + timedelta(days=28))])
    assert drift == pytest.approx((math.log(55 / 50) + math.log(52 / 40)) / 2)
    assert alone == 0.0 and none == 0.0   # the week 70 days on is in no earlier year; nothing before the first
    assert point_in_time.seasonal_drift(weeks + [(start - timedelta(days=364 - 28), None)],
                                        [(start, start + timedelta(days=28))]) == [pytest.approx(drift)]


def test_seasonal_drift_keeps_a_one_week_peak_whole():
    """A peak one week wide (Christmas in search interest): the year before, the week three weeks on stood at 90
    between weeks at 50. The drift to it is the whole log(90 / 50), to its neighbours none; a mean over the
    neighbouring weeks would have flattened it to a third."""
    start = D("2015-11-29")
    year_before = start - timedelta(days=364)
    weeks = [(year_before + timedelta(weeks=ahead), 50.0) for ahead in range(6) if ahead != 3]
    weeks.append((year_before + timedelta(weeks=3), 90.0))
    to_peak, to_before, to_after = point_in_time.seasonal_drift(
        weeks, [(start, start + timedelta(weeks=ahead)) for ahead in (3, 2, 4)])
    assert to_peak == pytest.approx(math.log(90 / 50))
    assert to_before == pytest.approx(0.0) and to_after == pytest.approx(0.0)


def test_a_week_after_as_of_gets_the_last_complete_week_moved_by_the_season(spark):
    """Each earlier summer the trend rose 3 % a week: a day whose seed week starts w weeks after the last complete
    week (07-05 .. 07-11) gets its value x exp(w x 0.03). Weeks after as-of change nothing; the earlier years'
    weeks do (the season comes from them)."""
    # Seed weeks (from the Sunday ending the day's ISO week): 07-12, 07-26 and 08-02, 1, 3 and 4 weeks on.
    days = [("BY", D("2015-07-08")), ("BY", D("2015-07-21")), ("BY", D("2015-07-29"))]

    def carried(rows):
        state, germany = strict_trend_tables(spark, rows, plan_end=D("2015-08-03"))
        return (trend_of_days(spark, state, ["State"], "trend", days),
                trend_of_days(spark, germany, [], "trend_de", days))

    rising = carried(seasonal_rows(0.03, level_2015=1.3))
    last = round(60 * 1.3 * math.exp(0.03 * (D("2015-07-05") - D("2015-06-01")).days / 7))   # week ending 07-11
    for table in rising:
        for (_state, day), weeks_ahead in zip(days, (1, 3, 4)):
            assert table[("BY", day)] == pytest.approx(last * math.exp(0.03 * weeks_ahead), abs=1.0)
    assert rising[0][days[2]] > last + 5
    assert carried(seasonal_rows(0.03, level_2015=1.3, after_as_of=40)) == rising
    assert carried(seasonal_rows(-0.03, level_2015=1.3))[0][days[2]] < last - 5


# --- weather: climatology, rounding, persistence ----------------------------------------------------------------

WEATHER_AS_OF = D("2015-07-15")
TARGET = D("2015-07-20")   # a horizon day; its windows: 07-13 .. 07-27 of 2014 and of 2013


def weather_frame(spark, rows):
    """weather.csv rows as parse_columns types them; rows: (StateName, Date, {column: value})."""
    def typed(kind):
        return "double" if kind == DOUBLE else "date" if kind == DATE else "string"
    schema = ", ".join(f"{name} {typed(kind)}" for name, kind in WEATHER.columns)
    data = [tuple({"file": name, "Date": day, **values}.get(col) for col in WEATHER.column_names)
            for name, day, values in rows]
    return with_problem_column(spark.createDataFrame(data, schema))


def classified_weather(spark, rows, cutoff=None):
    names = with_problem_column(spark.createDataFrame([("Bayern", "BY"), ("Hamburg", "HH")],
                                                      "StateName string, State string"))
    return joins.classify_weather(weather_frame(spark, rows), names, WEATHER, cutoff=cutoff)


def strict_weather(spark, rows, plan_end=D("2015-07-21")):
    """{(State, Date): row} of the weather table known at WEATHER_AS_OF, as pipeline.lookup_tables builds it."""
    weather = classified_weather(spark, rows, cutoff=WEATHER_AS_OF)
    _state, _germany, table = lookup_tables(Lookups(None, None, trend_rows(spark, []), weather), WEATHER_AS_OF,
                                            plan_frame(spark, plan_end), point_in_time.STRICT)
    return {(r.State, r.Date): r.asDict() for r in table.collect()}


def test_a_horizon_day_gets_the_rounded_climatology_of_earlier_years(spark):
    rows = [("Bayern", D("2014-07-13"), {"Max_TemperatureC": 20.0, "Mean_Humidity": 60.0, "Events": "Rain"}),
            ("Bayern", D("2014-07-27"), {"Max_TemperatureC": 22.0, "Mean_Humidity": 61.0, "Events": "Snow"}),
            ("Bayern", D("2013-07-20"), {"Max_TemperatureC": 21.0, "Mean_Humidity": 60.0}),
            ("Bayern", D("2013-07-25"), {"Max_TemperatureC": 19.0, "Mean_Humidity": 61.0}),
            # just outside the windows, and the same year's days near the target: not part of the climatology
            ("Bayern", D("2014-07-12"), {"Max_TemperatureC": -40.0, "Mean_Humidity": 0.0}),
            ("Bayern", D("2014-07-28"), {"Max_TemperatureC": -40.0, "Mean_Humidity": 0.0}),
            ("Bayern", D("2015-07-15"), {"Max_TemperatureC": 90.0, "Mean_Humidity": 99.0}),
            # after as-of: ignored
            ("Bayern", D("2015-07-20"), {"Max_TemperatureC": 80.0, "Mean_Humidity": 99.0, "Events": "Fog"})]
    table = strict_weather(spark, rows)
    filled = table[("BY", TARGET)]
    assert filled["Max_TemperatureC"] == 21.0            # (20 + 22 + 21 + 19) / 4
    assert filled["Mean_Humidity"] == 61.0               # 60.5 rounds half up to a whole percent
    assert filled["Events"] is None and filled[joins.HAS_WEATHER] is True
    # A day up to as-of gets the climatology of the other years too, not its own observation (the model learns
    # from the weather it is given on the horizon): 2014-07-12 (-40), 2014-07-13 (20) and 2013-07-20 (21).
    assert table[("BY", D("2015-07-15"))]["Max_TemperatureC"] == 0.0
    assert table[("BY", D("2014-07-13"))]["Events"] is None
    # No day after as-of comes from weather.csv.
    assert {day for _state, day in table if day > WEATHER_AS_OF} == {D("2015-07-16") + timedelta(days=i)
                                                                      for i in range(6)}


def test_without_history_a_column_persists_the_last_observed_value(spark):
    rows = [("Hamburg", D("2015-07-01"), {"Max_TemperatureC": 18.0, "CloudCover": 3.0}),
            ("Hamburg", D("2015-07-14"), {"Max_TemperatureC": 17.0, "CloudCover": 5.0}),
            ("Hamburg", D("2015-07-15"), {"Max_TemperatureC": 16.0}),          # CloudCover blank that day
            ("Bayern", D("2014-07-20"), {"Max_TemperatureC": 25.0}),           # climatology, but no CloudCover
            ("Bayern", D("2015-07-10"), {"Max_TemperatureC": 30.0, "CloudCover": 7.0})]
    table = strict_weather(spark, rows)
    assert table[("HH", TARGET)]["Max_TemperatureC"] == 16.0
    assert table[("HH", TARGET)]["CloudCover"] == 5.0                    # its last observed (non-blank) value
    assert table[("BY", TARGET)]["Max_TemperatureC"] == 25.0
    assert table[("BY", TARGET)]["CloudCover"] == 7.0


def test_weather_rows_after_as_of_are_flagged(spark):
    rows = [("Bayern", D("2015-07-15"), {}), ("Bayern", D("2015-07-16"), {})]
    strict = classified_weather(spark, rows, cutoff=WEATHER_AS_OF)
    reference = classified_weather(spark, rows)
    assert {r.Date: r[point_in_time.AFTER_AS_OF] for r in strict.collect()} == {D("2015-07-15"): False,
                                                                              D("2015-07-16"): True}
    assert {r[point_in_time.AFTER_AS_OF] for r in reference.collect()} == {False}


# --- the prepare job on generated data: perturbation and a realistic drop -----------------------------------------

@pytest.fixture(scope="module")
def snapshot(pit_drops):
    return pit_drops.snapshot


def prepared(pit_drops, drop, mode):
    """(metadata, {split: sorted pandas frame}) of a drop prepared once in the session (conftest.pit_drops)."""
    done = pit_drops(drop, mode)
    return done.metadata, done.splits()


@pytest.fixture(scope="module")
def strict_full(pit_drops):
    return prepared(pit_drops, "full", point_in_time.STRICT)


@pytest.fixture(scope="module")
def seed_full(pit_drops):
    return prepared(pit_drops, "full", point_in_time.REFERENCE)


def assert_same_splits(ours, theirs):
    for name in SPLITS:
        pd.testing.assert_frame_equal(ours[name], theirs[name], obj=name)


def test_strict_features_ignore_every_value_dated_after_as_of_and_seed_features_do_not(snapshot, pit_drops,
                                                                                         strict_full, seed_full):
    metadata, splits = strict_full
    changed_metadata, changed_splits = prepared(pit_drops, "perturbed", point_in_time.STRICT)
    assert set(ORIGIN_COLS) <= set(splits["train"].columns) & set(splits["test"].columns)   # compared too
    assert_same_splits(splits, changed_splits)
    assert metadata["vocabularies"] == changed_metadata["vocabularies"]
    assert metadata["max_sales"] == changed_metadata["max_sales"]
    assert len(splits["test"]) == len(snapshot["test.csv"])

    # The same perturbation moves the reference's features: its joins read values dated after as-of.
    _seed_metadata, seed = seed_full
    _changed_seed_metadata, changed_seed = prepared(pit_drops, "perturbed", point_in_time.REFERENCE)
    for col in ("trend", "trend_de", "Max_TemperatureC", "Mean_Humidity"):
        assert (seed["test"][col] != changed_seed["test"][col]).any(), col
    # The last days (validation rows: the out-of-time window ends at as-of): their seed weeks end after as-of.
    last_days = seed["validation"]["Date"] > AS_OF - timedelta(days=7)
    assert last_days.any()
    assert (seed["validation"].loc[last_days, "trend"] != changed_seed["validation"].loc[last_days, "trend"]).any()


def decoded_events(metadata, frame):
    """Events as values: the horizon's Events (seed mode only) can add a value that shifts the indices."""
    values = [None, *metadata["vocabularies"]["Events"]]
    return frame.assign(Events=[values[i] for i in frame["Events"]])


def test_strict_gives_history_and_horizon_the_same_kind_of_weather_and_keeps_completed_trend_weeks(strict_full,
                                                                                                   seed_full):
    strict_metadata, strict = strict_full
    seed_metadata, seed = seed_full
    weather = [*point_in_time.WEATHER_FEATURE_COLS, "Events"]
    for name in ("train", "validation", "test"):
        ours, theirs = decoded_events(strict_metadata, strict[name]), decoded_events(seed_metadata, seed[name])
        # Climatology, no events, for every row: the observed weather of the history differs from it.
        assert ours["Events"].isna().all(), name
        assert (ours["Max_TemperatureC"] != theirs["Max_TemperatureC"]).mean() > 0.5, name
        if name == "test":
            continue
        # Days whose reference trend week ended by as-of: every other feature as the reference computes it, but on the
        # late-December days of ISO week 1, where strict mode meets the week ending the day's ISO week and the
        # seed's calendar-year key a year-old one (joins.classify_trend).
        dates = pd.to_datetime(ours["Date"])
        complete = (ours["Date"] <= AS_OF - timedelta(days=13)) & (dates.dt.isocalendar().year == dates.dt.year)
        assert complete.any(), name
        others = [col for col in ours.columns if col not in weather]
        pd.testing.assert_frame_equal(ours.loc[complete, others], theirs.loc[complete, others], obj=name)
    # The last days' trend is the last complete week's in strict mode, a later week's in reference mode.
    assert (strict["validation"]["trend"] != seed["validation"]["trend"]).any()


def test_the_ledger_counts_lookup_rows_dated_after_as_of(snapshot, strict_full):
    metadata, _splits = strict_full
    files = metadata["row_counts"]["files"]
    weather_after = sum(D(r["Date"]) > AS_OF for r in snapshot["weather.csv"])
    trend_after = sum(week_end_of(r["week"]) > AS_OF for r in snapshot["googletrend.csv"])
    assert weather_after and trend_after
    assert files["weather.csv"] == {"accepted": len(snapshot["weather.csv"]) - weather_after,
                                    "after_as_of": weather_after}
    assert files["googletrend.csv"] == {"accepted": len(snapshot["googletrend.csv"]) - trend_after,
                                        "after_as_of": trend_after}
    assert metadata["point_in_time"]["mode"] == point_in_time.STRICT
    assert set(metadata["point_in_time"]["rules"]) == {"sales_rows", "trend", "weather", "lookup_rows_after_as_of"}


def test_a_realistic_drop_passes_strict_prepare_with_the_features_of_the_full_snapshot(pit_drops, strict_full):
    metadata, splits = prepared(pit_drops, "realistic", point_in_time.STRICT)
    assert metadata["row_counts"]["rejected"] == 0
    assert all(outcome != "quarantined" for outcomes in metadata["row_counts"]["files"].values()
               for outcome in outcomes)
    full_metadata, full_splits = strict_full
    assert_same_splits(splits, full_splits)
    assert metadata["vocabularies"] == full_metadata["vocabularies"]


def decoded_features(metadata, frame):
    """Store, Date and the model's inputs, the categorical ones as values (two drops' vocabularies may differ)."""
    values = {col: [None, *metadata["vocabularies"][col]] for col in CATEGORICAL_COLS}
    return frame[["StoreId", "Date", *FEATURE_COLS]].assign(
        **{col: [values[col][index] for index in frame[col]] for col in CATEGORICAL_COLS})


def test_where_the_plan_ends_moves_no_model_input_but_the_days_to_an_event_in_the_cut_days(pit_drops, strict_full):
    """The end of the plan is not an event. With the plan two weeks shorter, every row keeps every model input, but
    DaysTo<Event> on the horizon's last week where the event was in the days cut: the cap now, none known. (The
    seed's Before counts, spec.UNFED_BEFORE_COLS, count down to the plan's last day: not model inputs.) The validation
    window is as long as the horizon, so rows move between train and validation: compared as one history."""
    metadata, splits = strict_full
    short_metadata, short = prepared(pit_drops, "short-plan", point_in_time.STRICT)
    assert not set(UNFED_BEFORE_COLS) & set(short["test"].columns)
    plan_end = short["test"]["Date"].max()
    days_to = [col for col in FEATURE_COLS if col.startswith("DaysTo")]

    def history(prepared_splits):
        rows = pd.concat([prepared_splits["train"], prepared_splits["validation"]])
        return rows.sort_values(["StoreId", "Date"]).reset_index(drop=True)
    for name, whole, cut in (("history", history(splits), history(short)), ("test", splits["test"], short["test"])):
        whole, cut = decoded_features(metadata, whole), decoded_features(short_metadata, cut)
        if name == "test":
            whole = whole[whole["Date"] <= plan_end].reset_index(drop=True)
            last_week = (pd.to_datetime(whole["Date"]) > pd.Timestamp(plan_end) - pd.Timedelta(days=NEAR_EVENT_DAYS))
            moved = (whole[days_to] != cut[days_to]).any(axis=1)
            assert moved.any() and not (moved & ~last_week).any()   # some event fell in the days cut
            # where a day count moved, the short plan's is the cap and the whole plan's a day of the cut's first week
            changed = whole.loc[moved, days_to] != cut.loc[moved, days_to]
            assert (cut.loc[moved, days_to][changed] == NEAR_EVENT_DAYS).sum().sum() == changed.sum().sum()
            assert (whole.loc[moved, days_to][changed] < NEAR_EVENT_DAYS).sum().sum() == changed.sum().sum()
            whole, cut = whole.drop(columns=days_to), cut.drop(columns=days_to)
        pd.testing.assert_frame_equal(whole, cut, obj=name)


def test_the_cli_defaults_to_strict_and_accepts_seed():
    from rossmann_jobs.prepare import parse_args

    base = ["--raw", "r", "--out", "o", "--as-of", "2015-07-31"]
    assert parse_args(base).point_in_time == point_in_time.STRICT
    assert parse_args([*base, "--point-in-time", "reference"]).point_in_time == point_in_time.REFERENCE
