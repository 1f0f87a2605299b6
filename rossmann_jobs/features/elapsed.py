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


def add_elapsed(df: DataFrame, eligible: Column, events: Mapping[str, Column] | None = None,
                same_pass: Mapping[str, Column] | None = None) -> DataFrame:
    """Add After<event> (>= 0) and Before<event> (<= 0) day counts per Store over the eligible rows.

    After = days since the latest event on or before the row's date, or since the store's first eligible date if
    there is none; Before = minus the days until the next event on or after the row's date, or until the store's
    last eligible date. An event on the same date counts for every row of that date, so ties are deterministic.
    Rows that are not eligible neither contribute nor get meaningful values. same_pass: more window columns over
    (Store; Date) for the same Window operator (one sort serves them all).
    """
    events = events or event_flags()
    event_dates = {col: f"_{col}_event_date" for col in events}
    dated = df.withColumns({event_dates[col]: F.when(eligible & happened, F.col("Date"))
                            for col, happened in events.items()})
    # After: a growing frame (unbounded preceding .. current row), which Spark updates row by row. Before: the
    # date's own event (the running max reaches the row's date), else the next row's event date, lead IGNORE
    # NULLS, also one pass. Not a frame to unbounded following (re-aggregated per row: quadratic per store), nor a
    # descending frame (a second sort of every row).
    ascending = Window.partitionBy("Store").orderBy("Date")
    so_far = ascending.rangeBetween(Window.unboundedPreceding, Window.currentRow)
    whole_store = ascending.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    eligible_date = F.when(eligible, F.col("Date"))
    first_date, last_date = F.min(eligible_date).over(whole_store), F.max(eligible_date).over(whole_store)
    elapsed = {}
    for col, event_date in event_dates.items():
        latest = F.max(event_date).over(so_far)
        upcoming = F.when(latest == F.col("Date"), latest).otherwise(
            F.expr(f"lead({event_date}) IGNORE NULLS").over(ascending))
        elapsed["After" + col] = F.datediff("Date", F.coalesce(latest, first_date))
        elapsed["Before" + col] = F.datediff("Date", F.coalesce(upcoming, last_date))
    return dated.withColumns({**elapsed, **(same_pass or {})}).drop(*event_dates.values())
