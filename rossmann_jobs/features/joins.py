"""Lookup tables (store, state, Google trend, weather) and their joins onto the sales rows, quarantining misses.

Every lookup is made unique on its join key first (duplicates are quarantined), and every join is a left join
whose misses are quarantined with a reason, so a join can neither drop nor multiply a sales row.
"""
from __future__ import annotations

from datetime import date
from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.features.date_features import COMPETITION_SINCE, PROMO2_SINCE, add_since_dates, trend_key_year
from rossmann_jobs.features.point_in_time import AFTER_AS_OF, WEEK_START, dated_after, week_end
from rossmann_jobs.features.raw_schemas import WEATHER_FEATURE_COLS, RawFile
from rossmann_jobs.features.validate import acceptable, quarantine_duplicates, quarantine_first, quarantine_where

GERMANY_TREND_FILE = "Rossmann_DE"
# googletrend.csv names Niedersachsen "NI"; store_states.csv and state_names.csv call it "HB,NI".
TREND_STATE_ALIASES = {"NI": "HB,NI"}
STORE_COLS = ["StoreType", "Assortment", "CompetitionDistance", "CompetitionOpenSinceYear", "Promo2SinceYear",
              "PromoInterval", COMPETITION_SINCE, PROMO2_SINCE]
WEATHER_COLS = [*WEATHER_FEATURE_COLS, "Events"]
TREND_YEAR, TREND_WEEK = "_trend_year", "_trend_week"   # of the week's first day, the trend join key
# The marker column each lookup join brings (null where it found nothing), see LOOKUP_MISSES.
HAS_TREND, HAS_TREND_DE, HAS_WEATHER = "_has_trend", "_has_trend_de", "_has_weather"


def accepted(df: DataFrame) -> DataFrame:
    return df.filter(acceptable())


def quarantine_duplicate_keys(df: DataFrame, raw_file: RawFile) -> DataFrame:
    """Apply the file's uniqueness rules (RawFile.keys)."""
    for keys in raw_file.keys:
        df = quarantine_duplicates(df, keys, raw_file.column_names)
    return df


def classify_trend(trend: DataFrame, raw_file: RawFile, cutoff: date | None = None,
                   iso_keys: bool = False) -> DataFrame:
    """googletrend rows + week start Date, State (NI -> HB,NI; null for Rossmann_DE), Year, ISO Week, AFTER_AS_OF.

    Keys: a state row is found by (State, Year, Week), the Germany row by (Year, Week), where Year/Week
    (TREND_YEAR/TREND_WEEK here) are those of the week's first day (a Sunday), so a sales day meets the trend of
    the Sunday that ends its ISO week. Year is the calendar year in Horovod's example (iso_keys False): there, in a
    year whose 1 January is a Sunday, that Sunday (ISO week 52 or 53 of the year before) and the year's last
    Sunday share a key, and a late-December day of ISO week 1 meets a year-old week. With iso_keys, Year is the
    ISO week-numbering year (trend_key_year; the sales rows then join on the same, add_lookup_columns): every week
    has its own key. Rows colliding on a key are quarantined. AFTER_AS_OF: the week ends after cutoff
    (point_in_time.dated_after).
    """
    state = F.regexp_extract("file", f"^{GERMANY_TREND_FILE}_(.+)$", 1)
    for code, alias in TREND_STATE_ALIASES.items():
        state = F.when(state == code, alias).otherwise(state)
    week_start = F.regexp_extract("week", r"^\s*(\d{4}-\d{2}-\d{2}) - \d{4}-\d{2}-\d{2}\s*$", 1)
    df = (quarantine_duplicate_keys(trend, raw_file)
          .withColumn("_week_start", week_start)
          .withColumn("Date", F.expr("try_cast(nullif(_week_start, '') AS DATE)"))
          .drop("_week_start")
          .withColumn("State", F.when(state != "", state))
          .withColumn("_germany", F.when(F.col("file") == GERMANY_TREND_FILE, F.lit(GERMANY_TREND_FILE))))
    df = quarantine_where(df, F.col("Date").isNull(), "unparseable week (expected 'YYYY-MM-DD - YYYY-MM-DD')",
                          "week", raw_file.column_names)
    # Not named Year/Week: Spark column names are case-insensitive, and "Week" would overwrite the raw "week".
    df = (df.withColumn(TREND_YEAR, trend_key_year(F.col("Date"), iso_keys))
          .withColumn(TREND_WEEK, F.weekofyear("Date"))
          .withColumn(AFTER_AS_OF, dated_after(week_end(F.col("Date")), cutoff)))
    # Two weeks a year apart can share a seed key (see the test); scoped by AFTER_AS_OF, so that a week after the
    # cutoff cannot quarantine a usable one.
    df = quarantine_duplicates(df, ["State", TREND_YEAR, TREND_WEEK], raw_file.column_names,
                               scope_after=[AFTER_AS_OF], label="State,Year,Week")
    return quarantine_duplicates(df, ["_germany", TREND_YEAR, TREND_WEEK], raw_file.column_names,
                                 scope_after=[AFTER_AS_OF], label=f"{GERMANY_TREND_FILE} Year,Week")


def state_trend(classified_trend: DataFrame, *extra: Column) -> DataFrame:
    """The state trend join table (State, Year, Week, trend, HAS_TREND, *extra) of the accepted rows."""
    return (accepted(classified_trend).filter(F.col("State").isNotNull())
            .select("State", F.col(TREND_YEAR).alias("Year"), F.col(TREND_WEEK).alias("Week"), "trend",
                    F.lit(True).alias(HAS_TREND), *extra))


def germany_trend(classified_trend: DataFrame, *extra: Column) -> DataFrame:
    """The Germany trend join table (Year, Week, trend_de, HAS_TREND_DE, *extra) of the accepted rows."""
    return (accepted(classified_trend).filter(F.col("_germany").isNotNull())
            .select(F.col(TREND_YEAR).alias("Year"), F.col(TREND_WEEK).alias("Week"), F.col("trend").alias("trend_de"),
                    F.lit(True).alias(HAS_TREND_DE), *extra))


def trend_week_start() -> Column:
    """The extra column of state_trend/germany_trend that point_in_time.trend_known_at orders weeks by."""
    return F.col("Date").alias(WEEK_START)


def classify_weather(weather: DataFrame, state_names: DataFrame, raw_file: RawFile,
                     cutoff: date | None = None) -> DataFrame:
    """weather rows + State (via file == StateName) + AFTER_AS_OF (dated after cutoff); (State, Date) must be
    unique among accepted rows.

    Weather of a file that names no state is accepted but unused (the example's inner join ignores it too).
    """
    names = accepted(state_names).select(F.col("StateName").alias("file"), "State")
    df = (quarantine_duplicate_keys(weather, raw_file).join(F.broadcast(names), "file", "left")
          .withColumn(AFTER_AS_OF, dated_after(F.col("Date"), cutoff)))
    return quarantine_duplicates(df, ["State", "Date"], raw_file.column_names)


def weather_by_state(classified_weather: DataFrame) -> DataFrame:
    """The weather join table (State, Date, WEATHER_COLS, HAS_WEATHER) of the accepted rows."""
    return (accepted(classified_weather).filter(F.col("State").isNotNull())
            .select("State", "Date", *WEATHER_COLS, F.lit(True).alias(HAS_WEATHER)))


LOOKUP_MISSES = [("_has_store", "Store not in store.csv", "Store"),
                 ("_has_state", "Store not in store_states.csv", "Store"),
                 (HAS_TREND, "no googletrend.csv row for the store's (State, Year, Week)", "State,Year,Week"),
                 (HAS_TREND_DE, f"no {GERMANY_TREND_FILE} googletrend.csv row for (Year, Week)", "Year,Week"),
                 (HAS_WEATHER, "no weather.csv row for (State, Date) via state_names.csv", "State,Date")]


def add_store_columns(rows: DataFrame, store: DataFrame, store_states: DataFrame) -> DataFrame:
    store_info = add_since_dates(accepted(store)).select("Store", *STORE_COLS, F.lit(True).alias("_has_store"))
    states = accepted(store_states).select("Store", "State", F.lit(True).alias("_has_state"))
    return rows.join(F.broadcast(store_info), "Store", "left").join(F.broadcast(states), "Store", "left")


def add_lookup_columns(rows: DataFrame, store: DataFrame, store_states: DataFrame, trend_by_state: DataFrame,
                       trend_germany: DataFrame, weather: DataFrame, iso_trend_keys: bool = False) -> DataFrame:
    """Left-join store, state, trends and weather onto rows (which need Store, Date, Year, Week).

    Each lookup brings a marker column (LOOKUP_MISSES) that is null where it found nothing. iso_trend_keys: the
    trend tables' Year is the ISO week-numbering year (classify_trend), so the rows join on theirs, and keep their
    calendar Year (a feature).
    """
    keyed = rows.withColumnRenamed("Year", _CALENDAR_YEAR).withColumn("Year", trend_key_year(F.col("Date"), True)) \
        if iso_trend_keys else rows
    joined = (add_store_columns(keyed, store, store_states)
              .join(F.broadcast(trend_by_state), ["State", "Year", "Week"], "left")
              .join(F.broadcast(trend_germany), ["Year", "Week"], "left")
              .join(F.broadcast(weather), ["State", "Date"], "left"))
    return joined.drop("Year").withColumnRenamed(_CALENDAR_YEAR, "Year") if iso_trend_keys else joined


_CALENDAR_YEAR = "_calendar_year"


def join_lookups(rows: DataFrame, store: DataFrame, store_states: DataFrame, trend_by_state: DataFrame,
                 trend_germany: DataFrame, weather: DataFrame, in_scope: str, record_cols: Sequence[str],
                 earlier_checks: Sequence[tuple[Column, str, str]] = (), iso_trend_keys: bool = False) -> DataFrame:
    """add_lookup_columns, then rows where in_scope is true and a lookup misses are quarantined with the first
    missing lookup as reason (after the caller's earlier_checks, (condition, reason, column), in one step)."""
    joined = add_lookup_columns(rows, store, store_states, trend_by_state, trend_germany, weather, iso_trend_keys)
    checks = [*earlier_checks, *[(F.col(in_scope) & F.col(marker).isNull(), reason, column)
                                 for marker, reason, column in LOOKUP_MISSES]]
    return drop_markers(quarantine_first(joined, checks, record_cols))


def drop_markers(df: DataFrame) -> DataFrame:
    return df.drop(*[marker for marker, _reason, _column in LOOKUP_MISSES])
