"""Point-in-time modes of prepare: which trend and weather values a row may use when forecasting as of D.

- reference (--point-in-time reference): Horovod's example's joins, unchanged (a row meets the trend week found by its
  calendar key and its own day's weather, after D too); kept for the reference-equivalence test and comparisons.
- strict (the default): no feature depends on a value dated after D. A Google-trend week is usable once its
  Saturday end is <= D (weeks keyed by ISO year and week); a row whose week ends after D gets the last usable week
  of its series moved by the season (seasonal_drift: the mean log change between the same two weeks in earlier
  years, every series pooled), or that value itself without an earlier year (docs/decisions.md, "the trend of a
  week not yet known at D"). Every row, history and horizon, gets its state's weather climatology (the mean of
  +-7 days in the other years up to D; Events null), so training sees the inputs the horizon gets. Lookup rows
  dated after D are ignored (AFTER_AS_OF in the row ledger); a missing (State, day <= D) is still a lookup miss.
The sales rows follow features/split.py in both modes. All functions are DataFrame -> DataFrame steps but
season_drift_table, which collects the trend's weekly values (one small job) and computes the season on the driver.
"""
from __future__ import annotations

import math
from datetime import date, timedelta
from typing import Callable, Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, IntegralType

from rossmann_jobs.features.date_features import trend_key_year
from rossmann_jobs.features.raw_schemas import WEATHER_FEATURE_COLS
from rossmann_jobs.features.split import AFTER_AS_OF as AFTER_AS_OF_OUTCOME
from rossmann_jobs.features.validate import acceptable

STRICT, REFERENCE = "strict", "reference"
MODES = (STRICT, REFERENCE)
DEFAULT_MODE = STRICT

AFTER_AS_OF = "_after_as_of"      # column of the trend and weather tables: the row is dated after D (strict)
WEEK_START = "_week_start"        # a trend row's Sunday
CLIMATE_WINDOW_DAYS = 7           # +- days around d's date in each earlier year
WEATHER_DECIMALS = 0              # weather.csv's feature columns hold whole numbers (degrees C, %, km/h, oktas)
# A row dated d meets a trend week that ends at most 12 days after d (d a Monday): the days from D - 12 on are the
# ones whose week may be incomplete at D.
TREND_WEEK_REACH_DAYS = 12
_TARGET = "_target_date"
# The season of the trend: the same week in earlier years (52 weeks back keeps the Sunday), all series pooled (the
# season is the country's; pooling averages each file's own noise). A week is read alone, not with its neighbours:
# a mean over +-7 days flattened the Christmas peak and mixed the rising week after the anchor into it, and the
# November origins' projected trend came out 2.3 % low (docs/decisions.md, "the trend's season read week by week").
SEASON_LAG_DAYS = 364
SEASON_YEARS = 5                  # earlier years looked at; a googletrend.csv holds about three
SERIES, TREND_VALUE = "_series", "_trend_value"                       # columns of trend_series
DRIFT_FROM, DRIFT_TO, DRIFT = "_drift_from", "_drift_to", "_drift"   # season_drift_table (week starts, log change)

SALES_RULE = ("train/validation: train.csv rows dated <= as_of; test: test.csv rows dated > as_of (the plan, known "
              "at as_of); vocabularies, max_sales, Before/After day counts and near-event days use only those rows "
              "(train.csv rows after as_of feed nothing); a Year later than the train split's last, and an ISO week 53 "
              "the train split holds no day of, are encoded as that year and as week 52, whose embeddings training "
              "learnt")
RULES = {
    REFERENCE: {
        "sales_rows": SALES_RULE,
        "trend": "the reference's join: a row dated d meets the week keyed by d's (Year, ISO Week), which starts on "
                 "the Sunday ending d's ISO week and may end after as_of; rows after as_of meet their own weeks",
        "weather": "the reference's join: every row meets the weather.csv row of its state and day, also after as_of",
        "lookup_rows_after_as_of": "used (accounted as accepted)",
    },
    STRICT: {
        "sales_rows": SALES_RULE,
        "trend": "a googletrend.csv week is usable if its Saturday end <= as_of; a row dated d gets the week that "
                 "starts on the Sunday ending d's ISO week (keyed by ISO year and week) if usable, else, when that "
                 "week ends after as_of, the last usable week's value of its state (resp. Rossmann_DE); a missing "
                 "week that ended by as_of is a lookup miss; the carried value is moved by the season: times "
                 f"exp(the mean log change between the same two weeks {SEASON_LAG_DAYS // 7} weeks earlier in each "
                 "earlier year, "
                 "every series pooled), "
                 "persistence where no earlier year holds both",
        "weather": "every row (history and horizon alike) gets per state and numeric column the mean of the "
                   f"state's values within +-{CLIMATE_WINDOW_DAYS} days of its date in every other year (dated "
                   f"<= as_of), rounded to {WEATHER_DECIMALS} decimals, else the state's last observed value <= "
                   "as_of; Events null; a (State, day <= as_of) without a weather.csv row is a lookup miss",
        "lookup_rows_after_as_of": f"ignored (accounted as {AFTER_AS_OF_OUTCOME}): weather days > as_of, trend "
                                   "weeks ending after as_of",
    },
}


def describe(mode: str) -> dict:
    """metadata.json's point_in_time entry: the mode and its rules."""
    return {"mode": mode, "rules": RULES[mode]}


def iso_trend_keys(mode: str) -> bool:
    """Whether the trend join keys by ISO week-numbering year (strict), or by calendar year as the reference does
    (joins.classify_trend: the reference's key gives two weeks one key in a year whose 1 January is a Sunday)."""
    return mode == STRICT


def lookup_cutoff(mode: str, as_of: date) -> date | None:
    """The last day a lookup row may be dated and still be used: as_of in strict mode, None (no limit) in reference."""
    if mode not in MODES:
        raise ValueError(f"point-in-time mode {mode!r}: expected one of {', '.join(MODES)}")
    return as_of if mode == STRICT else None


def dated_after(day: Column, cutoff: date | None) -> Column:
    """AFTER_AS_OF of a lookup row dated day: true when day > cutoff (never when there is no cutoff or no day)."""
    if cutoff is None:
        return F.lit(False)
    return F.coalesce(day > F.lit(cutoff), F.lit(False))


def after_as_of(frame: DataFrame) -> Column:
    """A lookup table's AFTER_AS_OF column; false for the undated tables (store, states), which have none."""
    return F.col(AFTER_AS_OF) if AFTER_AS_OF in frame.columns else F.lit(False)


def week_end(week_start: Column) -> Column:
    """The Saturday ending a googletrend.csv week (Sunday..Saturday)."""
    return F.date_add(week_start, 6)


def reference_week_end(day: Column) -> Column:
    """The Saturday end of the trend week a day meets in strict mode (keyed by ISO year and week,
    joins.classify_trend): the week starting on the Sunday that ends the day's ISO week."""
    sunday = F.next_day(F.date_sub(day, 1), "Sun")
    return week_end(sunday)


def covered_days(plan: DataFrame, as_of: date) -> DataFrame:
    """Date: every day from as_of - TREND_WEEK_REACH_DAYS to the last acceptable plan (test.csv) row's date, the
    days whose trend or weather may be unknown at as_of; no row when no plan row is dated after as_of."""
    last = plan.filter(acceptable()).agg(F.max("Date").alias("_last"))
    days = F.sequence(F.lit(as_of - timedelta(days=TREND_WEEK_REACH_DAYS)), F.col("_last"))
    return last.select(F.explode(F.when(F.col("_last") > F.lit(as_of), days)).alias("Date"))


def trend_known_at(weeks: DataFrame, keys: Sequence[str], value: str, marker: str, days: DataFrame,
                   as_of: date, drift: DataFrame) -> DataFrame:
    """A trend join table (keys, Year, Week, value, marker) as known at as_of.

    weeks: the usable weeks (Saturday end <= as_of) with keys, Year (ISO week-numbering, as strict mode keys the
    trend), Week, value and WEEK_START. Added: for each key group and each (Year, Week) of a day in days whose seed
    week ends after as_of that no usable week has, the group's last usable week's value moved by the season from
    that week to this one (drift: season_drift_table's DRIFT_FROM, DRIFT_TO, DRIFT; a missing pair is persistence),
    rounded to the value's whole units if they are whole. keys may be empty (Germany).
    """
    columns = [*keys, "Year", "Week", value, marker]
    last = (weeks.groupBy(*keys).agg(F.max_by(value, WEEK_START).alias(value), F.max(WEEK_START).alias(DRIFT_FROM))
            .filter(F.col(value).isNotNull()))   # no usable week at all: nothing to carry forward
    pending = (days.filter(reference_week_end(F.col("Date")) > F.lit(as_of))
               .select(trend_key_year(F.col("Date"), iso_keys=True).alias("Year"), F.weekofyear("Date").alias("Week"),
                       F.date_sub(reference_week_end(F.col("Date")), 6).alias(DRIFT_TO))
               .distinct())
    carried = (last.crossJoin(pending).join(weeks.select(*keys, "Year", "Week"), [*keys, "Year", "Week"], "left_anti")
               .join(F.broadcast(drift), [DRIFT_FROM, DRIFT_TO], "left")
               .withColumn(value, moved_by_season(F.col(value), F.col(DRIFT), weeks.schema[value].dataType))
               .withColumn(marker, F.lit(True)))
    return weeks.select(*columns).unionByName(carried.select(*columns))


def trend_series(weeks: DataFrame, keys: Sequence[str], value: str) -> DataFrame:
    """(SERIES, WEEK_START, TREND_VALUE) of a trend table's weeks, each series named by the value column and its
    keys (Germany's table has none)."""
    name = F.concat_ws("/", F.lit(value), *[F.col(key).cast("string") for key in keys])
    return weeks.select(name.alias(SERIES), WEEK_START, F.col(value).cast("double").alias(TREND_VALUE))


def pooled_trend_series(state_weeks: DataFrame, germany_weeks: DataFrame) -> DataFrame:
    """Every trend series of the states' table (State, WEEK_START, trend) and Germany's (WEEK_START, trend_de), pooled:
    the input of season_drift_table (googletrend.csv holds both, and the season is learnt from all of them)."""
    return trend_series(state_weeks, ["State"], "trend").unionByName(trend_series(germany_weeks, [], "trend_de"))


FromWeeks = Callable[[Mapping[str, date]], set[date]]


def each_series_last_week(lasts: Mapping[str, date]) -> set[date]:
    """The weeks prepare carries forward: each series' last one."""
    return set(lasts.values())


def newest_weeks(weeks_back: int) -> FromWeeks:
    """The newest week of the pooled series and the weeks_back weeks before it (the origins of predict's validation
    rows)."""
    return lambda lasts: ({max(lasts.values()) - timedelta(weeks=back) for back in range(weeks_back + 1)}
                          if lasts else set())


def season_drift_table(series: DataFrame, from_weeks: FromWeeks) -> DataFrame:
    """(DRIFT_FROM, DRIFT_TO, DRIFT): the log change the season brings from each week that from_weeks picks (given
    each series' last week) to each later week up to a year after the series' last week (beyond that no earlier
    year holds the later week: persistence). series: pooled_trend_series.
    The weeks are one small file's (about 150 a series), collected in one job and worked on the driver: as Spark
    queries the few dozen anchors cost prepare 55 more Spark jobs and 20 s (docs/decisions.md, "the trend of a week
    not yet known at D")."""
    rows = series.collect()
    lasts: dict[str, date] = {}
    for row in rows:
        lasts[row[SERIES]] = max(lasts.get(row[SERIES], row[WEEK_START]), row[WEEK_START])
    newest_week = max(lasts.values(), default=None)
    pairs = [(start, start + timedelta(weeks=ahead)) for start in sorted(from_weeks(lasts))
             for ahead in range(1, (newest_week - start).days // 7 + SEASON_LAG_DAYS // 7 + 2)]
    drifts = seasonal_drift([(row[WEEK_START], row[TREND_VALUE]) for row in rows], pairs)
    schema = f"{DRIFT_FROM} date, {DRIFT_TO} date, {DRIFT} double"
    return series.sparkSession.createDataFrame([(*pair, drift) for pair, drift in zip(pairs, drifts)], schema)


def seasonal_drift(weeks: Sequence[tuple[date, float | None]], pairs: Sequence[tuple[date, date]]) -> list[float]:
    """For each (from, to) pair of week starts, the log change the season brings from the one week to the other: the
    mean over the earlier years k (1..SEASON_YEARS) that hold both of S(to - 364 k) - S(from - 364 k), S(w) the mean
    log value (floored at 1: a googletrend.csv index is 0..100) of week w over every series. 0.0 (persistence) where
    no earlier year holds both. weeks: (week start, value) of every series; no week later than 364 days before a
    pair's `to` is read."""
    logs: dict[date, list[float]] = {}
    for start, value in weeks:
        if value is not None:
            logs.setdefault(start, []).append(math.log(max(float(value), 1.0)))

    def season(week: date) -> float | None:
        values = logs.get(week)
        return sum(values) / len(values) if values else None

    drifts = []
    for start, end in pairs:
        changes = []
        for years in range(1, SEASON_YEARS + 1):
            then_start, then_end = (season(day - timedelta(days=SEASON_LAG_DAYS * years)) for day in (start, end))
            if then_start is not None and then_end is not None:
                changes.append(then_end - then_start)
        drifts.append(sum(changes) / len(changes) if changes else 0.0)
    return drifts


def moved_by_season(value: Column, drift: Column, data_type: DataType) -> Column:
    """value x exp(drift) as data_type, rounded first if that type is integral (googletrend.csv's whole units)."""
    moved = value.cast("double") * F.exp(F.coalesce(drift, F.lit(0.0)))
    return (F.round(moved) if isinstance(data_type, IntegralType) else moved).cast(data_type)


def weather_known_at(observed: DataFrame, days: DataFrame, as_of: date, marker: str) -> DataFrame:
    """A weather join table (State, Date, WEATHER_FEATURE_COLS, Events, marker) as known at as_of, the same for
    the history and the horizon: the model must learn from the weather it will be given when it forecasts.

    observed: the usable weather rows (dated <= as_of). Every observed (State, Date) and every day of days after
    as_of for each state with history gets, per numeric column, the climatology (the rounded mean of the state's
    values within +-CLIMATE_WINDOW_DAYS of the date in every other year, dated <= as_of), else the state's last
    observed value; Events is null (no day after as_of has a known event, so no row is given one). A (State, Date)
    without a weather row up to as_of stays without one (a lookup miss, as before).
    """
    numeric = list(WEATHER_FEATURE_COLS)
    ahead = days.filter(F.col("Date") > F.lit(as_of)).select(F.col("Date").alias(_TARGET))
    targets = (observed.select("State", F.col("Date").alias(_TARGET))
               .unionByName(observed.select("State").distinct().crossJoin(ahead)))
    years = observed.agg(F.year(F.min("Date")).alias("_first"), F.year(F.max("Date")).alias("_last"))
    # The same +-7-day window in every other year of the history (add_months keeps Feb 29 sane).
    anchor = F.add_months(F.col(_TARGET), F.col("_years") * 12)
    window_days = F.sequence(F.date_sub(anchor, CLIMATE_WINDOW_DAYS), F.date_add(anchor, CLIMATE_WINDOW_DAYS))
    candidates = (targets.select(_TARGET).distinct().crossJoin(years)
                  .select(_TARGET, F.explode(F.sequence(F.col("_first") - F.year(_TARGET),
                                                        F.col("_last") - F.year(_TARGET))).alias("_years"))
                  .filter(F.col("_years") != 0)
                  .select(_TARGET, F.explode(window_days).alias("Date")))
    climate = (candidates.join(observed, "Date").groupBy("State", _TARGET)
               .agg(*[F.round(F.avg(col), WEATHER_DECIMALS).alias(f"_climate_{col}") for col in numeric]))
    # max_by skips the rows whose ordering is null: the last date on which the column was observed.
    last = observed.groupBy("State").agg(*[F.max_by(col, F.when(F.col(col).isNotNull(), F.col("Date"))).alias(col)
                                           for col in numeric])
    return (targets.join(F.broadcast(last), "State").join(climate, ["State", _TARGET], "left")
            .select("State", F.col(_TARGET).alias("Date"),
                    *[F.coalesce(f"_climate_{col}", col).alias(col) for col in numeric],
                    F.lit(None).cast("string").alias("Events"), F.lit(True).alias(marker)))
