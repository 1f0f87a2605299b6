"""The point-in-time tests' drops: one generated snapshot, its copy with every value after as-of changed, and the drop
as it would land, each written and prepared once per mode for the whole session (tests/jobs/conftest.py)."""
from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from datetime import date, timedelta

import pandas as pd

from rossmann_jobs import storage
from rossmann_jobs.features.raw_schemas import RAW_FILES, WEATHER

D = date.fromisoformat
STORES, SEED = 4, 5
AS_OF = D("2015-07-15")   # a Wednesday, before the test period (2015-08-01 ..): the horizon lies after it
SPLITS = ("train", "validation", "test")


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def write_csv(path, name, rows):
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=RAW_FILES[name].column_names, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.getvalue())


def week_end_of(week_text):
    return D(week_text.split(" - ")[1].strip())


def perturbed(files):
    """Every value dated after AS_OF changed, within the files' valid ranges; test.csv (the plan) unchanged."""
    flip = {"0": "1", "1": "0"}
    out = {name: [dict(row) for row in rows] for name, rows in files.items()}
    for row in out["train.csv"]:
        if D(row["Date"]) > AS_OF:
            opened = flip[row["Open"]]   # a closed day has no sales (a closed day with sales is quarantined)
            row.update(Sales=str(int(row["Sales"]) * 2 + 7) if opened == "1" else "0",
                       Customers=str(int(row["Customers"]) + 3), Open=opened, Promo=flip[row["Promo"]],
                       SchoolHoliday=flip[row["SchoolHoliday"]],
                       StateHoliday="a" if row["StateHoliday"] == "0" else "0")
    numeric = [name for name, kind in WEATHER.columns if name not in ("file", "Date", "Events")]
    for row in out["weather.csv"]:
        if D(row["Date"]) > AS_OF:
            for col in numeric:
                row[col] = str(float(row[col]) + 3) if row[col].strip() else "4"
            row["Events"] = {"": "Rain", "Rain": "Snow"}.get(row["Events"], "")
    for row in out["googletrend.csv"]:
        if week_end_of(row["week"]) > AS_OF:
            row["trend"] = str((int(row["trend"]) + 17) % 101)
    return out


def realistic(files):
    """The drop of AS_OF as it would land: history up to it only, and the plan of the days after it."""
    return {**files,
            "train.csv": [r for r in files["train.csv"] if D(r["Date"]) <= AS_OF],
            "weather.csv": [r for r in files["weather.csv"] if D(r["Date"]) <= AS_OF],
            "googletrend.csv": [r for r in files["googletrend.csv"] if week_end_of(r["week"]) <= AS_OF]}


PLAN_CUT_DAYS = 14


def short_plan(files):
    """The same drop with its plan (test.csv) ending PLAN_CUT_DAYS days earlier."""
    end = max(D(row["Date"]) for row in files["test.csv"]) - timedelta(days=PLAN_CUT_DAYS)
    return {**files, "test.csv": [row for row in files["test.csv"] if D(row["Date"]) <= end]}


DROPS = {"full": lambda files: files, "perturbed": perturbed, "realistic": realistic, "short-plan": short_plan}


def committed_splits(out: str) -> dict[str, pd.DataFrame]:
    """Every split of a committed prepare output, sorted by store and date (shard and row order are not the claim)."""
    attempt = storage.committed_uri(out)
    return {name: pd.read_parquet(storage.join(attempt, name)).sort_values(["StoreId", "Date"]).reset_index(drop=True)
            for name in SPLITS}


@dataclass(frozen=True)
class PreparedDrop:
    files: dict[str, list[dict]]
    raw: str         # the landed drop (CSV files)
    features: str    # the prepare output
    metadata: dict   # what run_prepare returned

    def splits(self) -> dict[str, pd.DataFrame]:
        return committed_splits(self.features)


class PreparedDrops:
    """prepared(drop, mode): the drop (a DROPS name) landed and prepared in the session's Spark, once per mode."""

    def __init__(self, spark, snapshot: dict[str, list[dict]], folder):
        self.spark, self.snapshot, self.folder = spark, snapshot, folder
        self._done: dict[tuple[str, str], PreparedDrop] = {}

    def __call__(self, drop: str, mode: str) -> PreparedDrop:
        from rossmann_jobs.prepare import run_prepare

        if (drop, mode) not in self._done:
            files = DROPS[drop](self.snapshot)
            raw, out = (os.path.join(self.folder, f"{drop}-{mode}", part) for part in ("raw", "features"))
            os.makedirs(raw)
            for name, rows in files.items():   # every drop through the same CSV writer: only the values differ
                write_csv(os.path.join(raw, name), name, rows)
            metadata = run_prepare(self.spark, raw, out, AS_OF, num_shards=2, point_in_time_mode=mode)
            self._done[drop, mode] = PreparedDrop(files, raw, out, metadata)
        return self._done[drop, mode]
