"""Event flags and the Before<Event>/After<Event> day counts per store, computed with window functions."""
from __future__ import annotations

from typing import Mapping

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

def event_flags() -> dict[str, Column]:
    """Promo, StateHoliday, SchoolHoliday as booleans: anything but "0"/0 is an event (as in the example)."""
    return {"Promo": F.col("Promo") != 0, "StateHoliday": F.col("StateHoliday") != "0",
            "SchoolHoliday": F.col("SchoolHoliday") != 0}


def flag_events(df: DataFrame) -> DataFrame:
    """Replace the raw event columns by their boolean flags."""
    return df.withColumns(event_flags())


def add_elapsed(df: DataFrame, eligible: Column, events: Mapping[str, Column] | None = None) -> DataFrame:
    """Add After<event> (>= 0) and Before<event> (<= 0) day counts per Store over the eligible rows."""
    # One projection: Spark evaluates the windows of each ordering in one pass.
    return df.withColumns(elapsed_columns(eligible, events))


def elapsed_columns(eligible: Column, events: Mapping[str, Column] | None = None) -> dict[str, Column]:
    """The After<event> (>= 0) and Before<event> (<= 0) day counts per Store over the eligible rows.

    After = days since the latest event on or before the row's date, or since the store's first eligible date if
    there is none; Before = minus the days until the next event on or after the row's date, or until the store's
    last eligible date. An event on the same date counts for every row of that date, so ties are deterministic.
    Rows that are not eligible neither contribute nor get meaningful values.
    """
    # Growing frames only (unbounded preceding .. current row, once per direction): Spark updates them row by
    # row, whereas a frame running to unbounded following is re-aggregated for every row (quadratic per store).
    ascending = Window.partitionBy("Store").orderBy("Date")
    descending = Window.partitionBy("Store").orderBy(F.col("Date").desc())
    so_far = ascending.rangeBetween(Window.unboundedPreceding, Window.currentRow)
    from_now = descending.rangeBetween(Window.unboundedPreceding, Window.currentRow)
    whole_store = ascending.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    eligible_date = F.when(eligible, F.col("Date"))
    first_date, last_date = F.min(eligible_date).over(whole_store), F.max(eligible_date).over(whole_store)
    elapsed = {}
    for col, happened in (events or event_flags()).items():
        event_date = F.when(eligible & happened, F.col("Date"))
        elapsed["After" + col] = F.datediff("Date", F.coalesce(F.max(event_date).over(so_far), first_date))
        elapsed["Before" + col] = F.datediff("Date", F.coalesce(F.min(event_date).over(from_now), last_date))
    return elapsed
