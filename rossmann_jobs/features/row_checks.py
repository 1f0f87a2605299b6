"""Row problems found by prepare's parse and lookups, counted and judged: a file whose problems exceed
--max-reject-fraction, or any problem in the plan, is refused naming the file, the column, the failed values' patterns
and example rows; what stays under the bar is quarantined and every input row is accounted for."""
from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.features import row_accounting, split
from rossmann_jobs.features.pipeline import problem_rows
from rossmann_jobs.features.raw_schemas import RAW_FILES, STRING, TEST, TRAIN
from rossmann_jobs.features.validate import (
    REASON,
    REASON_COLUMN,
    acceptable,
    check_accounting,
    check_plan_rows,
    check_reject_fraction,
    examples_by_problem,
    over_reject_fraction,
)
from rossmann_jobs.spark_session import held_frames

log = logging.getLogger("rossmann.prepare")


def collect_examples(quarantine: DataFrame) -> dict[str, dict[tuple[str, str], list[str]]]:
    """Example records per file and (reason, column), for error messages."""
    by_file: dict[str, list] = {}
    for row in row_accounting.problem_examples(quarantine).collect():
        by_file.setdefault(row["file"], []).append((row["reason"], row["column"], row["record"]))
    return {name: examples_by_problem(items) for name, items in by_file.items()}


def collect_patterns(quarantine: DataFrame) -> dict[str, dict[tuple[str, str], list[tuple[str, str, int]]]]:
    """The commonest shapes of the failed values per file and (reason, column), for error messages."""
    by_file: dict[str, dict[tuple[str, str], list[tuple[str, str, int]]]] = {}
    for row in row_accounting.value_patterns(quarantine).orderBy("file", "reason", "column", F.desc("rows")).collect():
        by_file.setdefault(row["file"], {}).setdefault((row["reason"], row["column"]), []).append(
            (row["shape"], row["example"], row["rows"]))
    return by_file


def train_tallies() -> list:
    """Observed over the sales rows: train.csv's rows with a parse problem, and per unused typed column the rows
    without a usable value (blank, or read as missing: RawFile.unused)."""
    train = F.col(split.SOURCE) == "train"
    return [F.count(F.when(train & ~acceptable(), 1)).alias("problems"),
            *[F.count(F.when(train & acceptable() & F.col(name).isNull(), 1)).alias(f"unreadable:{name}")
              for name in TRAIN.unused if TRAIN.kind(name) != STRING]]


def check_train_parse(train: DataFrame, observed: dict[str, Any], input_rows: int,
                      max_reject_fraction: float) -> dict[str, int]:
    """Refuse a train.csv whose parse problems alone exceed --max-reject-fraction, naming each column, the patterns
    of the values that failed and example rows (the later checks would see only the rows they leave: no dated row,
    join losses, empty splits). Returns the unused columns' counts of rows without a usable value."""
    if over_reject_fraction(input_rows, observed["problems"], max_reject_fraction):
        # Materialized first, as the plan is (see run_prepare): the queries below would otherwise each re-plan the
        # parse, whose CASE expressions the optimizer inlines into their filters (out of memory).
        with held_frames() as hold:
            quarantine = problem_rows({TRAIN.name: hold(train)})
            problems = {(row["reason"], row["column"]): row["rows"] for row in
                        quarantine.groupBy("reason", "column").agg(F.count(F.lit(1)).alias("rows")).collect()}
            check_reject_fraction(TRAIN.name, input_rows, problems, collect_examples(quarantine).get(TRAIN.name, {}),
                                  max_reject_fraction, collect_patterns(quarantine).get(TRAIN.name, {}))
    unreadable = {key.split(":", 1)[1]: rows for key, rows in observed.items()
                  if key.startswith("unreadable:") and rows}
    for name, rows in unreadable.items():
        log.warning("train.csv: column '%s' (not used by the model) has no usable value in %d of %d rows (blank, "
                    "or read as missing: not a number, or out of range)", name, rows, input_rows)
    return unreadable


def column_report(inputs: dict[str, dict[str, Any]], unreadable: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Per raw file with anything to report: its ignored and absent columns (validate.header_report) and its unused
    columns' rows without a usable value."""
    report: dict[str, dict[str, Any]] = {}
    for name, facts in inputs.items():
        entry = dict(facts.get("columns") or {})
        if unreadable.get(name):
            entry["unused_without_value"] = unreadable[name]
        if entry:
            report[name] = entry
    return report


def check_rows(input_rows: dict[str, int], outcomes: dict[str, dict[str, int]],
               problems: dict[str, dict[tuple[str, str], int]], quarantine: DataFrame,
               max_reject_fraction: float) -> None:
    """Fail on too many quarantined rows in a file, any in the plan, or on rows that did not end up in exactly one
    place."""
    if any(problems.values()):
        examples = collect_examples(quarantine)
        failing = [name for name, file_problems in problems.items() if name == TEST.name and file_problems
                   or over_reject_fraction(input_rows[name], sum(file_problems.values()), max_reject_fraction)]
        patterns = collect_patterns(quarantine) if failing else {}
        for name, file_problems in problems.items():
            if name == TEST.name:
                check_plan_rows(name, input_rows[name], file_problems, examples.get(name, {}), patterns.get(name))
            check_reject_fraction(name, input_rows[name], file_problems, examples.get(name, {}), max_reject_fraction,
                                  patterns.get(name))
            if file_problems:
                log.warning("%s: quarantining %d rows: %s", name, sum(file_problems.values()), file_problems)
    for name in RAW_FILES:
        check_accounting(name, input_rows[name], outcomes[name])


def check_lookups_and_plan(lookup_frames: dict[str, DataFrame], plan: DataFrame, input_rows: dict[str, int],
                           max_reject_fraction: float) -> list[dict[str, Any]]:
    """Each lookup file's and the plan's own row problems (parsing, duplicates), before any join: a lookup file
    over --max-reject-fraction, or any plan row with a problem, fails naming the file, column and examples.
    Returns the lookup files' accounting.lookup_summary groups (their ledger)."""
    frames = {**lookup_frames, TEST.name: plan}
    groups = [row.asDict() for row in row_accounting.lookup_summary(frames).collect()]
    problems: dict[str, dict[tuple[str, str], int]] = {}
    for group in groups:
        if group[REASON]:
            key = (group[REASON], group[REASON_COLUMN])
            file_problems = problems.setdefault(group["file"], {})
            file_problems[key] = file_problems.get(key, 0) + group["rows"]
    if problems:
        quarantine = problem_rows({name: frames[name] for name in problems})
        examples = collect_examples(quarantine)
        failing = TEST.name in problems or any(
            over_reject_fraction(input_rows[name], sum(file_problems.values()), max_reject_fraction)
            for name, file_problems in problems.items())
        patterns = collect_patterns(quarantine) if failing else {}
        for name, file_problems in problems.items():
            if name == TEST.name:
                check_plan_rows(name, input_rows[name], file_problems, examples.get(name, {}), patterns.get(name))
            check_reject_fraction(name, input_rows[name], file_problems, examples.get(name, {}), max_reject_fraction,
                                  patterns.get(name))
    return [group for group in groups if group["file"] != TEST.name]
