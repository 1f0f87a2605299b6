"""Which forecast `forecast/latest.json` points at: the one for the latest as-of date, whatever ran last (pure)."""
from __future__ import annotations

from datetime import date
from typing import Any


def replaces_latest(as_of: str, current: dict[str, Any] | None) -> bool:
    """True when a forecast for as_of (YYYY-MM-DD) should replace the current pointer's: there is none, or it is
    for the same or an earlier date. A backfill of an earlier date then never hides the newest forecast, and a
    re-run of the latest date replaces its own forecast."""
    return current is None or date.fromisoformat(as_of) >= date.fromisoformat(current["as_of"])
