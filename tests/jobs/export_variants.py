"""Kinds of raw drop that other tools export, each derived from a clean generated drop, with the outcome prepare must
give: the clean drop's features (the same values written another way), or a refusal naming file and column (a value
whose meaning changed, or a file that is not one).

A variant is a function of the clean files (name -> bytes) returning the files it changes; a folder (a Spark job's
output) is a dict of its entries. Variants that give the clean features compose: applied one after another they
make one drop that must still give them (tests/jobs/test_export_variants.py prepares it once).
"""
from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from typing import Callable

Files = dict[str, bytes]


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]

    def column(self, name: str) -> int:
        return self.header.index(name)

    def map(self, name: str, change: Callable[[str], str]) -> "Table":
        i = self.column(name)
        return Table(self.header, [[*row[:i], change(row[i]), *row[i + 1:]] for row in self.rows])

    def select(self, names: list[str]) -> "Table":
        index = [self.column(name) for name in names]
        return Table(list(names), [[row[i] for i in index] for row in self.rows])

    def with_column(self, position: int, name: str, values: Callable[[int], str]) -> "Table":
        return Table([*self.header[:position], name, *self.header[position:]],
                     [[*row[:position], values(n), *row[position:]] for n, row in enumerate(self.rows)])


def read_table(data: bytes) -> Table:
    header, *rows = csv.reader(io.StringIO(data.decode("utf-8")))
    return Table(header, rows)


def write_table(table: Table, quoting: int = csv.QUOTE_MINIMAL, line_end: str = "\n") -> bytes:
    text = io.StringIO()
    writer = csv.writer(text, quoting=quoting, lineterminator=line_end)
    writer.writerow(table.header)
    writer.writerows(table.rows)
    return text.getvalue().encode("utf-8")


def edit(name: str, *steps: Callable[[Table], Table], quoting: int = csv.QUOTE_MINIMAL) -> Callable[[Files], Files]:
    def change(files: Files) -> Files:
        table = read_table(files[name])
        for step in steps:
            table = step(table)
        return {name: write_table(table, quoting)}
    return change


def values(column: str, change: Callable[[str], str]) -> Callable[[Table], Table]:
    return lambda table: table.map(column, change)


# --- value spellings ---------------------------------------------------------------------------------------------

def pandas_bool(text: str) -> str:
    return {"1": "True", "0": "False"}.get(text, text)


def spark_bool(text: str) -> str:
    return {"1": "true", "0": "false"}.get(text, text)


def r_logical(text: str) -> str:
    return {"1": "TRUE", "0": "FALSE"}.get(text, text)


def as_float(text: str) -> str:
    """An integer as pandas writes it after an upcast to float (1854 -> 1854.0); blanks stay blank."""
    return f"{int(text)}.0" if text.strip() else text


def padded(width: int) -> Callable[[str], str]:
    return lambda text: text.ljust(width)


def midnight(separator: str) -> Callable[[str], str]:
    return lambda text: f"{text}{separator}00:00:00" if text else text


def reordered(table: Table) -> Table:
    """The columns in another order (another export query): reversed, the key in the middle."""
    return table.select(list(reversed(table.header)))


def pandas_index(table: Table) -> Table:
    """pandas' to_csv without index=False: an unnamed first column holding the row number."""
    return table.with_column(0, "", str)


def without(*columns: str) -> Callable[[Table], Table]:
    return lambda table: table.select([c for c in table.header if c not in columns])


def spark_part_files(name: str, parts: int = 3) -> Callable[[Files], Files]:
    """The file as an upstream Spark job writes it: a folder of part files, each with the header, and _SUCCESS."""
    def change(files: Files) -> Files:
        table = read_table(files[name])
        size = -(-len(table.rows) // parts)
        folder = {f"part-{i:05d}-5f1c-c000.csv": write_table(Table(table.header, table.rows[i * size:(i + 1) * size]))
                  for i in range(parts)}
        return {name: {**folder, "_SUCCESS": b""}}
    return change


# --- outcomes ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Same:
    """Prepared features identical to the clean drop's; report: metadata.json input_columns entries expected."""

    report: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Refused:
    """RawInputError whose message starts with the file and names the column (and holds each of also)."""

    file: str
    column: str | None
    also: tuple[str, ...] = ()
    before_spark: bool = True   # refused by the file checks, before any Spark work


@dataclass(frozen=True)
class Variant:
    name: str
    change: Callable[[Files], Files]
    expect: Same | Refused


VARIANTS = [
    # --- the same values written another way: the clean features --------------------------------------------------
    Variant("train Open written True/False (pandas bool)", edit("train.csv", values("Open", pandas_bool)), Same()),
    Variant("train Customers written 1854.0 (pandas float upcast)",
            edit("train.csv", values("Customers", as_float)), Same()),
    Variant("store.csv columns in another order", edit("store.csv", reordered), Same()),
    Variant("store.csv StoreType and Assortment fixed-width text",
            edit("store.csv", values("StoreType", padded(3)), values("Assortment", padded(3))), Same()),
    Variant("test.csv Promo and SchoolHoliday written true/false (Spark boolean)",
            edit("test.csv", values("Promo", spark_bool), values("SchoolHoliday", spark_bool)), Same()),
    Variant("test.csv Open 1.0/0.0 with blanks (pandas float with NaN)", edit("test.csv", values("Open", as_float)),
            Same()),
    Variant("store.csv Promo2 written TRUE/FALSE (R logical), numbers padded",
            edit("store.csv", values("Promo2", r_logical), values("CompetitionDistance", lambda t: t.rjust(8))),
            Same()),
    Variant("train Sales and Store written as floats", edit("train.csv", values("Sales", as_float),
                                                             values("Store", as_float)), Same()),
    Variant("train Date with a zero time part (pandas timestamp)", edit("train.csv", values("Date", midnight(" "))),
            Same()),
    Variant("weather Date with a zero ISO time part", edit("weather.csv", values("Date", midnight("T"))), Same()),
    Variant("train.csv with pandas' index column", edit("train.csv", pandas_index),
            Same({"train.csv": {"ignored": ["(unnamed column 1)"]}})),
    Variant("store_states.csv with an extra column", edit("store_states.csv",
                                                          lambda t: t.with_column(2, "ExportedAt",
                                                                                  lambda n: "2015-08-01"))
            , Same({"store_states.csv": {"ignored": ["ExportedAt"]}})),
    Variant("weather.csv without the columns no feature reads",
            edit("weather.csv", without("Dew_PointC", "Max_Gust_SpeedKm_h", "WindDirDegrees")),
            Same({"weather.csv": {"absent": ["Dew_PointC", "Max_Gust_SpeedKm_h", "WindDirDegrees"]}})),
    Variant("googletrend.csv with every field quoted", edit("googletrend.csv", quoting=csv.QUOTE_ALL), Same()),
    # --- not the same: refused naming file and column -------------------------------------------------------------
    Variant("train.csv as a Spark output folder (part files, _SUCCESS)", spark_part_files("train.csv"),
            Refused("train.csv", None, ("is a folder", "part files", "part-00000"))),
    Variant("store.csv without Assortment", edit("store.csv", without("Assortment")),
            Refused("store.csv", "Assortment", ("missing column",))),
    Variant("train.csv with lower-case Open", edit("train.csv", lambda t: Table(
        ["open" if c == "Open" else c for c in t.header], t.rows)),
            Refused("train.csv", "Open", ("only in case",))),
    Variant("store.csv naming Store twice", edit("store.csv", lambda t: t.with_column(
        1, "Store", lambda n: str(n + 1))), Refused("store.csv", "Store", ("more than once",))),
    Variant("train Open written yes/no", edit("train.csv", values("Open", lambda t: {"1": "yes", "0": "no"}[t])),
            Refused("train.csv", "Open", ("unparseable flag", "'aaa' e.g. 'yes'"), before_spark=False)),
    Variant("train Sales with a fraction", edit("train.csv", values("Sales", lambda t: f"{t}.5")),
            Refused("train.csv", "Sales", ("unparseable int", "values like '"), before_spark=False)),
    Variant("train Date with a time of day", edit("train.csv", values("Date", lambda t: f"{t} 13:30:00")),
            Refused("train.csv", "Date", ("date with a time of day", "'9999-99-99 99:99:99'"), before_spark=False)),
]
BY_NAME = {variant.name: variant for variant in VARIANTS}
SAME = [variant for variant in VARIANTS if isinstance(variant.expect, Same)]
REFUSED = [variant for variant in VARIANTS if isinstance(variant.expect, Refused)]


def combined(variants: list[Variant], files: Files) -> Files:
    """The variants applied one after another: one drop holding every change."""
    out = dict(files)
    for variant in variants:
        out.update(variant.change(out))
    return out


def expected_report(variants: list[Variant]) -> dict:
    report: dict = {}
    for variant in variants:
        for name, entry in variant.expect.report.items():
            for key, names in entry.items():
                report.setdefault(name, {}).setdefault(key, []).extend(names)
    return report


def read_drop(folder: str, names) -> Files:
    out = {}
    for name in names:
        with open(os.path.join(folder, name), "rb") as handle:
            out[name] = handle.read()
    return out


def write_drop(folder: str, files: Files) -> str:
    os.makedirs(folder, exist_ok=True)
    for name, content in files.items():
        if isinstance(content, dict):
            os.makedirs(os.path.join(folder, name))
            for entry, data in content.items():
                with open(os.path.join(folder, name, entry), "wb") as handle:
                    handle.write(data)
        else:
            with open(os.path.join(folder, name), "wb") as handle:
                handle.write(content)
    return folder
