"""The prepare pipeline as one composition of pure steps: parsed raw frames -> classified, feature-complete rows."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from rossmann_jobs.features import joins, point_in_time, recent_level
from rossmann_jobs.features.date_features import add_competition_and_promo2, expand_date
from rossmann_jobs.features.event_days import add_event_days, flag_events
from rossmann_jobs.features.raw_schemas import TEST, RawFile
from rossmann_jobs.features.spec import CATEGORICAL_COLS, CONTINUOUS_COLS, LABEL_COL
from rossmann_jobs.features.split import IN_SCOPE, OUTCOME, SOURCE, Windows, assign_outcome, in_scope
from rossmann_jobs.features.validate import (
    PROBLEM,
    acceptable,
    countable_copy,
    quarantine_copies,
    quarantine_duplicates,
)

SALES_COLS = ["Id", "Store", "DayOfWeek", "Date", "Sales", "Customers", "Open", "Promo", "StateHoliday",
              "SchoolHoliday"]
VOCABULARY_ROW = "_vocabulary_row"
FEATURE_ROW_COLS = [SOURCE, IN_SCOPE, VOCABULARY_ROW, "Id", "Store", "Date", "Open", LABEL_COL,
                    *[c for c in CATEGORICAL_COLS + CONTINUOUS_COLS if c != "Store"], PROBLEM]
# IN_SCOPE is folded into OUTCOME; VOCABULARY_ROW is read only by the feature pass's observed metrics.
CLASSIFIED_COLS = [OUTCOME, *[c for c in FEATURE_ROW_COLS if c not in (IN_SCOPE, VOCABULARY_ROW)]]


@dataclass(frozen=True)
class Lookups:
    """Classified lookup tables (every row, with its quarantine reason if any)."""

    store: DataFrame
    store_states: DataFrame
    trend: DataFrame
    weather: DataFrame

    def each(self, step: Callable[[DataFrame], DataFrame]) -> "Lookups":
        """The same tables, each passed through step (prepare materializes them: spark_session.materialized)."""
        return Lookups(*(step(frame) for frame in (self.store, self.store_states, self.trend, self.weather)))

    @property
    def by_file(self) -> dict[str, DataFrame]:
        return {"store.csv": self.store, "store_states.csv": self.store_states, "googletrend.csv": self.trend,
                "weather.csv": self.weather}


def classify_lookups(parsed: dict[str, DataFrame], raw_files: dict[str, RawFile], as_of: date,
                     mode: str = point_in_time.DEFAULT_MODE) -> tuple[Lookups, DataFrame]:
    """Quarantine duplicate / unparseable lookup rows and flag the trend and weather rows dated after as_of in
    strict mode (point_in_time.AFTER_AS_OF); returns the lookups and the classified state_names.

    The tables are small (16k rows at most), so each is kept in one partition: its duplicate-key windows then
    need no shuffle.
    """
    cutoff = point_in_time.lookup_cutoff(mode, as_of)

    def single(name: str) -> DataFrame:
        return parsed[name].coalesce(1)

    state_names = joins.quarantine_duplicate_keys(single("state_names.csv"), raw_files["state_names.csv"])
    lookups = Lookups(
        store=joins.quarantine_duplicate_keys(single("store.csv"), raw_files["store.csv"]),
        store_states=joins.quarantine_duplicate_keys(single("store_states.csv"), raw_files["store_states.csv"]),
        trend=joins.classify_trend(single("googletrend.csv"), raw_files["googletrend.csv"], cutoff,
                                   iso_keys=point_in_time.iso_trend_keys(mode)),
        weather=joins.classify_weather(single("weather.csv"), state_names, raw_files["weather.csv"], cutoff),
    )
    return lookups, state_names


def sales_rows(train: DataFrame, test: DataFrame) -> DataFrame:
    """Parsed train and test rows in one frame (SOURCE tells them apart), test Ids made unique first.

    test.csv is small (41k rows): one partition lets its Id window run without a shuffle.
    """
    test = (quarantine_duplicates(test.coalesce(1), ["Id"], TEST.column_names)
            .withColumn("Sales", F.lit(None).cast("int")).withColumn("Customers", F.lit(None).cast("int")))
    return (train.withColumn("Id", F.lit(None).cast("int")).withColumn(SOURCE, F.lit("train"))
            .select(*SALES_COLS, SOURCE, PROBLEM)
            .unionByName(test.withColumn(SOURCE, F.lit("test")).select(*SALES_COLS, SOURCE, PROBLEM)))


def horizon_row() -> Column:
    """True for the horizon rows among the feature rows: the parseable test rows dated after as_of (VOCABULARY_ROW
    holds for exactly those test rows)."""
    return (F.col(SOURCE) == "test") & F.col(VOCABULARY_ROW)


def vocabulary_row(as_of: date) -> Column:
    """True for the rows whose values make the vocabularies: the parseable train rows up to as_of with Sales > 0
    and the parseable horizon (test) rows, as the sales rows come in (before any window's quarantine)."""
    return acceptable() & in_scope(as_of) & ((F.col(SOURCE) == "test") | (F.col("Sales") > 0))


def sales_features(rows: DataFrame, lookups: Lookups, as_of: date, plan: DataFrame,
                   mode: str = point_in_time.DEFAULT_MODE, broadcast_levels: bool = True) -> DataFrame:
    """Every sales row with its features (not encoded), IN_SCOPE, VOCABULARY_ROW and PROBLEM: FEATURE_ROW_COLS.

    The windows (duplicates, store seen in train, elapsed days) run first, on narrow rows: one shuffle by Store
    and one sort by (Store, Date) serve them all. The After and near-event days use every
    in-scope row that parses and is unique, including rows quarantined afterwards for a lookup miss or an unseen
    store (the event happened all the same; and an unseen store's rows are all quarantined). The broadcast joins
    of the lookups follow (trend and weather as mode allows at as_of, see lookup_tables). plan: the parsed
    test.csv rows, whose dates tell which days the strict tables must cover. Needs as_of, not the horizon (see
    horizon_row: it is found from these rows). broadcast_levels: recent_level.add_origin_features' join.
    """
    rows = rows.withColumn(VOCABULARY_ROW, vocabulary_row(as_of)).repartition("Store")
    rows = _quarantine_duplicate_days(rows).withColumn(IN_SCOPE, in_scope(as_of))
    # Between the two (Store; Date) window passes: a broadcast join keeps the rows' order, so the second pass needs
    # no new sort, and the origin features' code stays out of the fused stage of the joins (near the JIT limit).
    rows = recent_level.add_origin_features(rows, as_of, history=_sales_history(), broadcast=broadcast_levels)
    rows = add_event_days(rows, eligible=F.col(IN_SCOPE) & acceptable(), same_pass={SEEN_IN_TRAIN: _seen_in_train()})
    # Checked with the lookup misses (it comes first), so that one quarantine step renders the rejected record.
    unseen_store = ((F.col(SOURCE) == "test") & F.col(IN_SCOPE) & F.col(SEEN_IN_TRAIN).isNull(),
                    "Store has no train.csv rows on or before as-of", "Store")
    rows = joins.join_lookups(expand_date(rows), lookups.store, lookups.store_states,
                              *lookup_tables(lookups, as_of, plan, mode), IN_SCOPE, SALES_COLS,
                              earlier_checks=[unseen_store], iso_trend_keys=point_in_time.iso_trend_keys(mode))
    return add_competition_and_promo2(flag_events(rows)).select(*FEATURE_ROW_COLS)


def lookup_tables(lookups: Lookups, as_of: date, plan: DataFrame,
                  mode: str) -> tuple[DataFrame, DataFrame, DataFrame]:
    """The state trend, Germany trend and weather join tables: the reference's, or (strict) those known at as_of.

    Strict: the rows flagged AFTER_AS_OF are left out, and the days from shortly before as_of to the plan's last
    day get the carried-forward trend (moved by its season) and the climatology weather (point_in_time). Same
    schemas in both modes.
    """
    if mode == point_in_time.REFERENCE:
        return (joins.state_trend(lookups.trend), joins.germany_trend(lookups.trend),
                joins.weather_by_state(lookups.weather))
    days = point_in_time.covered_days(plan, as_of)
    weather = lookups.weather.filter(~F.col(point_in_time.AFTER_AS_OF))
    return (*trend_tables_known_at(lookups.trend, days, as_of),
            point_in_time.weather_known_at(joins.weather_by_state(weather), days, as_of, joins.HAS_WEATHER))


def trend_tables_known_at(classified_trend: DataFrame, days: DataFrame, as_of: date) -> tuple[DataFrame, DataFrame]:
    """Strict mode's state and Germany trend join tables: the usable weeks (ended by as_of), and for the days whose
    week ends later the last usable week moved by the season, learnt from every usable week of both."""
    trend = classified_trend.filter(~F.col(point_in_time.AFTER_AS_OF))
    week_start = joins.trend_week_start()
    state, germany = joins.state_trend(trend, week_start), joins.germany_trend(trend, week_start)
    drift = point_in_time.season_drift_table(point_in_time.pooled_trend_series(state, germany),
                                             point_in_time.each_series_last_week)
    return (point_in_time.trend_known_at(state, ["State"], "trend", joins.HAS_TREND, days, as_of, drift),
            point_in_time.trend_known_at(germany, [], "trend_de", joins.HAS_TREND_DE, days, as_of, drift))


def classify_sales(features: DataFrame, windows: Windows, sample_rate: float | None, seed: int) -> DataFrame:
    """The feature rows with their OUTCOME (split, exclusion or quarantine), CLASSIFIED_COLS only."""
    return assign_outcome(features, windows, sample_rate, seed).select(*CLASSIFIED_COLS)


SEEN_IN_TRAIN = "_seen_in_train"


def _quarantine_duplicate_days(rows: DataFrame) -> DataFrame:
    """Quarantine all acceptable rows of a file that share their (Store, Date) with another one of that file.

    The same as quarantine_duplicates(rows, ["Store", "Date"], scope_after=[SOURCE]), but counted over the peers
    of a (Store; Date) window, which shares the sort of the elapsed-days windows and, unlike a window per
    (Store, Date, source), needs no window partition per row.
    """
    keys = ["Store", "Date"]
    same_day = Window.partitionBy("Store").orderBy("Date").rangeBetween(Window.currentRow, Window.currentRow)
    copies = {source: F.count(F.when(countable_copy(keys) & (F.col(SOURCE) == source), 1)).over(same_day)
              for source in ("train", "test")}
    same_file_copies = F.when(F.col(SOURCE) == "train", copies["train"]).otherwise(copies["test"])
    return quarantine_copies(rows, keys, same_file_copies, SALES_COLS)


def _seen_in_train() -> Column:
    """True for every row of a store with a usable train row (in scope, acceptable), else null."""
    usable_train = (F.col(SOURCE) == "train") & F.col(IN_SCOPE) & acceptable()
    whole_store = Window.partitionBy("Store").orderBy("Date").rowsBetween(Window.unboundedPreceding,
                                                                          Window.unboundedFollowing)
    return F.max(F.when(usable_train, True)).over(whole_store)


def _sales_history() -> Column:
    """The rows whose sales make the recent levels: usable train rows up to as_of that sold something."""
    return (F.col(SOURCE) == "train") & F.col(IN_SCOPE) & acceptable() & (F.col("Sales") > 0)


def quarantined_rows(sales: DataFrame, lookups: Lookups, state_names: DataFrame) -> DataFrame:
    """All quarantined rows of all files as (file, reason, column, record)."""
    return problem_rows({**lookups.by_file, "state_names.csv": state_names},
                        sales.select(F.concat(F.col(SOURCE), F.lit(".csv")).alias("file"), PROBLEM))


def problem_rows(frames: dict[str, DataFrame], *tagged: DataFrame) -> DataFrame:
    """The quarantined rows of each file's frame (name -> frame with PROBLEM) and of the already tagged (file,
    PROBLEM) frames, as (file, reason, column, record)."""
    union = reduce(DataFrame.unionByName, [*tagged, *[df.select(F.lit(name).alias("file"), PROBLEM)
                                                      for name, df in frames.items()]])
    return union.filter(~acceptable()).select("file", *[F.col(f"{PROBLEM}.{field}").alias(field)
                                                        for field in ("reason", "column", "record")])
