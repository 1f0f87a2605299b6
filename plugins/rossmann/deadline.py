"""The forecast deadline: by a set time on day D+1 the published forecast (`forecast/latest.json`) must be as of D.

Airflow 3.3's DeadlineAlert would be the native tool, but it breaks `airflow dags test` (docs/airflow.md), which
the suite, the demo and the benches use; the `rossmann_forecast_deadline` DAG checks the pointer at the deadline
instead, and its failure alert (through the same `rossmann_alerts` connection) is the lateness alert.
"""
from __future__ import annotations

import os
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

DEADLINE_ENV = "ROSSMANN_FORECAST_DEADLINE"   # "HH:MM" UTC on the day after the as-of date
DEFAULT_DEADLINE = "06:00"


def deadline_time(setting: str | None = None) -> time:
    """The deadline's time of day (UTC) from `setting` or $ROSSMANN_FORECAST_DEADLINE ("HH:MM")."""
    text = setting if setting is not None else os.environ.get(DEADLINE_ENV, DEFAULT_DEADLINE)
    try:
        parsed = time.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{DEADLINE_ENV}={text!r} is not a time of day: use HH:MM (UTC), e.g. 06:00") from None
    return parsed.replace(second=0, microsecond=0, tzinfo=None)


def deadline_cron(setting: str | None = None) -> str:
    """The watchdog's schedule: every day at the deadline."""
    at = deadline_time(setting)
    return f"{at.minute} {at.hour} * * *"


def due_as_of(checked_at: datetime) -> date:
    """The as-of date whose forecast must be published when the deadline on `checked_at`'s day passes: the day
    before (the daily run for D starts after D ends)."""
    return (checked_at.astimezone(timezone.utc) - timedelta(days=1)).date()


def lateness(pointer: dict[str, Any] | None, due: date, pointer_uri: str) -> str | None:
    """Why the forecast for `due` is late (None: it is published). `pointer` is `forecast/latest.json`, which only
    ever moves to a later as-of date, so any as-of >= due means the due forecast was published."""
    if pointer is None:
        return f"no forecast is published at all ({pointer_uri} does not exist); the forecast as of {due} is due"
    published = date.fromisoformat(pointer["as_of"])
    if published >= due:
        return None
    return (f"the forecast as of {due} is not published: {pointer_uri} still holds the forecast as of {published} "
            f"(run {pointer.get('run_id')}, published {pointer.get('published_at')}). Check the rossmann_forecast "
            f"run for {due}: its drop may be missing (wait_for_raw_drop) or a task may have failed.")
