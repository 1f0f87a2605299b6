"""Row accounting: per-file outcome counts, quarantine reasons and examples, vocabulary value sets, max Sales."""
from __future__ import annotations

import json
from datetime import date
from functools import reduce
from typing import Any, Iterable, Mapping

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from rossmann_jobs.features import point_in_time, split
from rossmann_jobs.features.spec import CATEGORICAL_COLS, LABEL_COL
from rossmann_jobs.features.validate import EXAMPLES_PER_PROBLEM, REASON, REASON_COLUMN, problem_columns

ACCEPTED = "accepted"   # the outcome of a lookup-table row without problem (dated after as-of: split.AFTER_AS_OF)
TRAINING_OUTCOMES = (split.TRAIN, split.VALIDATION, split.SAMPLED_OUT)   # rows <= as-of that count as known


HORIZON_START, HORIZON_END = "_horizon_start", "_horizon_end"


def horizon_metrics(is_horizon_row: Column) -> list[Column]:
    """The first and last Date of the rows where is_horizon_row holds, as aggregates: DataFrame.observe computes
    them while another action reads the rows. ISO text, as observed metrics reach Python without type conversion
    (read them with horizon_dates)."""
    horizon_date = F.when(is_horizon_row, F.col("Date"))
    return [F.min(horizon_date).cast("string").alias(HORIZON_START),
            F.max(horizon_date).cast("string").alias(HORIZON_END)]


def horizon_dates(observed: Mapping[str, Any]) -> tuple[date, date] | None:
    """(first, last) horizon date from the observed horizon_metrics; None when there was no horizon row."""
    if observed[HORIZON_START] is None:
        return None
    return date.fromisoformat(observed[HORIZON_START]), date.fromisoformat(observed[HORIZON_END])


def vocabulary_metrics(vocabulary_flag: str) -> list[Column]:
    """The distinct values of every categorical column over the rows where vocabulary_flag is true, as aggregates
    for DataFrame.observe (so the feature materialization collects them); JSON text (read with vocabulary_values),
    as observed metrics reach Python without type conversion."""
    return [F.to_json(F.collect_set(F.when(F.col(vocabulary_flag), F.col(col)))).alias(col)
            for col in CATEGORICAL_COLS]


def vocabulary_values(observed: Mapping[str, Any]) -> dict[str, list]:
    """Each categorical column's distinct values from the observed vocabulary_metrics."""
    return {col: json.loads(observed[col]) for col in CATEGORICAL_COLS}


def outcome_summary(classified: DataFrame) -> DataFrame:
    """Per (file, outcome, reason, column) of the classified sales rows: the row count and the max Sales."""
    return (classified.groupBy(split.SOURCE, split.OUTCOME, *problem_columns())
            .agg(F.count(F.lit(1)).alias("rows"), F.max(LABEL_COL).alias("max_sales")))


def lookup_summary(frames: Mapping[str, DataFrame]) -> DataFrame:
    """Rows per (file, dated after as-of, reason, column) of the lookup files, in one job."""
    after = point_in_time.AFTER_AS_OF
    tagged = [frame.select(F.lit(name).alias("file"), point_in_time.after_as_of(frame).alias(after),
                           *problem_columns()) for name, frame in frames.items()]
    return reduce(DataFrame.unionByName, tagged).groupBy("file", after, REASON, REASON_COLUMN).agg(
        F.count(F.lit(1)).alias("rows"))


def lookup_outcome(group: Mapping[str, Any]) -> str:
    """The ledger outcome of a lookup_summary group: quarantined (a problem wins), after_as_of or accepted."""
    if group[REASON]:
        return split.QUARANTINED
    return split.AFTER_AS_OF if group[point_in_time.AFTER_AS_OF] else ACCEPTED


def problem_examples(quarantine: DataFrame) -> DataFrame:
    """Up to EXAMPLES_PER_PROBLEM quarantined (file, reason, column, record) rows per problem."""
    first = Window.partitionBy("file", "reason", "column").orderBy("record")
    return (quarantine.withColumn("_n", F.row_number().over(first)).filter(F.col("_n") <= EXAMPLES_PER_PROBLEM)
            .select("file", "reason", "column", "record"))


PATTERNS_PER_PROBLEM = 3


def value_patterns(quarantine: DataFrame) -> DataFrame:
    """Per problem (file, reason, column) of one column, the commonest shapes of the quarantined values (digits as 9,
    letters as a or A: '1854.5' is 9999.9), each with an example value and its row count; up to PATTERNS_PER_PROBLEM.

    The value is the column's field in the record (a JSON object); a malformed line or a multi-column problem has
    none.
    """
    value = F.expr("CASE WHEN `column` NOT LIKE '%,%' AND `column` != '*' AND record LIKE '{%' "
                   "THEN get_json_object(record, concat('$[\\'', `column`, '\\']')) END")
    shape = F.regexp_replace(F.regexp_replace(F.regexp_replace(F.col("value"), "[0-9]", "9"), "[a-z]", "a"),
                             "[A-Z]", "A")
    commonest = Window.partitionBy("file", "reason", "column").orderBy(F.desc("rows"), "shape")
    return (quarantine.withColumn("value", value).filter(F.col("value").isNotNull())
            .groupBy("file", "reason", "column", shape.alias("shape"))
            .agg(F.count(F.lit(1)).alias("rows"), F.min("value").alias("example"))
            .withColumn("_n", F.row_number().over(commonest)).filter(F.col("_n") <= PATTERNS_PER_PROBLEM)
            .select("file", "reason", "column", "shape", "example", "rows"))


def file_ledgers(input_rows: Mapping[str, int], sales_groups: Iterable[Mapping[str, Any]],
                 lookup_groups: Iterable[Mapping[str, Any]]
                 ) -> tuple[dict[str, dict[str, int]], dict[str, dict[tuple[str, str], int]]]:
    """Per file: rows per outcome; and per file: quarantined rows per (reason, column)."""
    outcomes: dict[str, dict[str, int]] = {name: {} for name in input_rows}
    problems: dict[str, dict[tuple[str, str], int]] = {name: {} for name in input_rows}
    groups = [(f"{g[split.SOURCE]}.csv", g[split.OUTCOME], g) for g in sales_groups]
    groups += [(g["file"], lookup_outcome(g), g) for g in lookup_groups]
    for name, outcome, group in groups:
        outcomes[name][outcome] = outcomes[name].get(outcome, 0) + group["rows"]
        if group[REASON]:
            key = (group[REASON], group[REASON_COLUMN])
            problems[name][key] = problems[name].get(key, 0) + group["rows"]
    return outcomes, problems


def max_sales(sales_groups: Iterable[Mapping[str, Any]]) -> float:
    return float(max(g["max_sales"] for g in sales_groups if g[split.OUTCOME] in TRAINING_OUTCOMES))
