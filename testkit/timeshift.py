"""A drop moved in time by whole weeks (weekdays kept): the generator's 2013-2015 data as of any later date."""
from __future__ import annotations

import datetime as dt
import re
from typing import Mapping

_ISO_DATE = re.compile(rb"\b(\d{4})-(\d{2})-(\d{2})\b")


def shifted_drop(files: Mapping[str, bytes], weeks: int) -> dict[str, bytes]:
    """Every YYYY-MM-DD in every file moved by `weeks` weeks (train, test, weather dates and trend weeks).

    Whole weeks keep each date's weekday, so DayOfWeek, the Sunday..Saturday trend weeks and the weekly opening
    pattern stay consistent; the holiday flags keep their rows (they then fall on other calendar days), and
    store.csv's since-years (no full dates) stay as they are. Used to test calendar edge cases of later years,
    e.g. years whose 1 January is a Sunday (2017, 2023).
    """
    delta = dt.timedelta(weeks=weeks)
    cache: dict[bytes, bytes] = {}

    def move(match: re.Match) -> bytes:
        text = match.group(0)
        if text not in cache:
            day = dt.date(*(int(part) for part in match.groups()))
            cache[text] = (day + delta).isoformat().encode()
        return cache[text]

    return {name: _ISO_DATE.sub(move, content) for name, content in files.items()}


def weeks_between(day: dt.date, target: dt.date) -> int:
    """The whole weeks from day to target; ValueError unless they fall on the same weekday."""
    days = (target - day).days
    if days % 7:
        raise ValueError(f"{day} and {target} are different weekdays: a drop moves by whole weeks only")
    return days // 7
