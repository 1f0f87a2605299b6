"""Event flags, the After<Event> day counts and the near-event days per store, by window functions."""
from __future__ import annotations

from typing import Mapping

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

# DaysTo<Event>/DaysSince<Event> (spec.NEAR_EVENT_COLS) stop at a week: the run-up to an event and the recovery
# after it, day by day; further away, or with no event known on that side, the value is the cap itself.
NEAR_EVENT_DAYS = 7


def event_flags() -> dict[str, Column]:
    """Promo, StateHoliday, SchoolHoliday as booleans: anything but "0"/0 is an event (as in the example)."""
    return {"Promo": F.col("Promo") != 0, "StateHoliday": F.col("StateHoliday") != "0",
            "SchoolHoliday": F.col("SchoolHoliday") != 0}


def flag_events(df: DataFrame) -> DataFrame:
    """Replace the raw event columns by their boolean flags."""
    return df.withColumns(event_flags())


def add_event_days(df: DataFrame, eligible: Column, events: Mapping[str, Column] | None = None,
                same_pass: Mapping[str, Column] | None = None) -> DataFrame:
    """Add After<event> (>= 0) day counts per Store over the eligible rows, and DaysSince<event> / DaysTo<event>
    (0 .. NEAR_EVENT_DAYS).

    After = days since the latest event on or before the row's date, or since the store's first eligible date if
    there is none (the reference's counts). DaysSince / DaysTo = the days since the latest event on or before the row's
    date / until the next one on or after it, capped at NEAR_EVENT_DAYS, and the cap where no eligible row holds such
    an event: the end of the horizon's plan is not an event. (The reference's Before<event> counts, which count down to
    the plan's end, are not computed: spec.UNFED_BEFORE_COLS.) An event on the same date counts for every row of that
    date, so ties are deterministic.
    Rows that are not eligible neither contribute nor get meaningful values. same_pass: more window columns over
    (Store; Date) for the same Window operator (one sort serves them all).
    """
    events = events or event_flags()
    event_dates = {col: f"_{col}_event_date" for col in events}
    dated = df.withColumns({event_dates[col]: F.when(eligible & happened, F.col("Date"))
                            for col, happened in events.items()})
    # After and DaysSince: a growing frame (unbounded preceding .. current row), which Spark updates row by row.
    # DaysTo: the date's own event (the running max reaches the row's date), else the next row's event date, lead
    # IGNORE NULLS, also one pass. Not a frame to unbounded following (re-aggregated per row: quadratic per store),
    # nor a descending frame (a second sort of every row).
    ascending = Window.partitionBy("Store").orderBy("Date")
    so_far = ascending.rangeBetween(Window.unboundedPreceding, Window.currentRow)
    whole_store = ascending.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    first_date = F.min(F.when(eligible, F.col("Date"))).over(whole_store)
    elapsed = {}
    for col, event_date in event_dates.items():
        latest = F.max(event_date).over(so_far)
        upcoming = F.when(latest == F.col("Date"), latest).otherwise(
            F.expr(f"lead({event_date}) IGNORE NULLS").over(ascending))
        elapsed["After" + col] = F.datediff("Date", F.coalesce(latest, first_date))
        elapsed["DaysSince" + col] = near_event_days(F.datediff("Date", latest))
        elapsed["DaysTo" + col] = near_event_days(F.datediff(upcoming, "Date"))
    return dated.withColumns({**elapsed, **(same_pass or {})}).drop(*event_dates.values())


def near_event_days(days: Column) -> Column:
    """days (>= 0, null without an event) capped at NEAR_EVENT_DAYS, the cap for null."""
    return F.least(F.coalesce(days, F.lit(NEAR_EVENT_DAYS)), F.lit(NEAR_EVENT_DAYS)).cast("int")
