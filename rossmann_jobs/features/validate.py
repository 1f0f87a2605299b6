"""Raw-input validation: header checks, typed parsing with per-row problem flags, quarantine and accounting rules."""
from __future__ import annotations

import csv
import io
import json
import operator
from functools import reduce
from typing import Iterable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from rossmann_jobs import storage
from rossmann_jobs.features.drop_manifest import FileDigest  # noqa: F401 (prepare and tests import it here)
from rossmann_jobs.features.raw_schemas import CORRUPT_COL, DATE, DOUBLE, INT, RawFile

# A row's first problem, struct<reason, column, record>; null while the row is acceptable. Each quarantine step
# refers to it once (coalesce(problem, new problem)), so chained steps keep the query plan linear in size.
PROBLEM = "_problem"
REASON, REASON_COLUMN = "_reason", "_reason_column"   # its fields as flat columns, for counting

# Spark's try_cast to INT is already strict (optional sign, ASCII digits, no fraction, no overflow); its DOUBLE
# and DATE casts are not ("Infinity", "1d"; "2015", "2015-7-1 x"), so those values must match a pattern first.
_PATTERNS = {
    DOUBLE: r"^[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?$",
    DATE: r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
}
_SQL_TYPES = {INT: "INT", DOUBLE: "DOUBLE", DATE: "DATE"}
EXAMPLES_PER_PROBLEM = 3
GZIP_MAGIC = b"\x1f\x8b"


class RawInputError(ValueError):
    """The raw drop cannot be prepared; the message names the file, the column and example rows."""


# --- file level -------------------------------------------------------------------------------------------------

def parse_header(raw_file: RawFile, head: bytes) -> list[str]:
    """Check the first line of a file (UTF-8, optional BOM, LF or CRLF); return its column names or raise."""
    if not head.strip():
        raise RawInputError(f"{raw_file.name}: the file is empty (expected the header "
                            f"{','.join(raw_file.column_names)} and data rows).")
    # Refused rather than decompressed: Spark picks a codec by file extension only, so it would read the bytes of
    # a gzip file named .csv as text, and the checksum/row count would describe the compressed file.
    if head.startswith(GZIP_MAGIC):
        raise RawInputError(f"{raw_file.name}: the file is gzip-compressed; the drop must hold plain UTF-8 CSV "
                            f"files. Decompress it (gunzip) before landing it under the name {raw_file.name}.")
    text = head.decode("utf-8", errors="replace").removeprefix("\ufeff")
    first_line = text.splitlines()[0]
    header = [name.strip() for name in next(csv.reader(io.StringIO(first_line)))]
    if len(header) == 1 and len(raw_file.columns) > 1:
        for delimiter, label in ((";", "semicolon"), ("\t", "tab"), ("|", "pipe")):
            if delimiter in header[0]:
                raise RawInputError(
                    f"{raw_file.name}: wrong delimiter: the header {first_line[:200]!r} is separated by {label}s, "
                    "expected commas. Re-export the file as comma-separated CSV.")
    expected = raw_file.column_names
    missing = [c for c in expected if c not in header]
    extra = [c for c in header if c not in expected]
    if missing or extra:
        raise RawInputError(
            f"{raw_file.name}: unexpected header {first_line[:300]!r}: missing columns {missing}, extra columns "
            f"{extra}. Expected exactly: {','.join(expected)}.")
    if header != expected:
        raise RawInputError(f"{raw_file.name}: columns are out of order: got {','.join(header)}, expected "
                            f"{','.join(expected)}.")
    return header


# --- row level --------------------------------------------------------------------------------------------------

def _sql_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _sql_string(text: str) -> str:
    """text as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _to_json_sql(fields: Sequence[tuple[str, str]]) -> str:
    """SQL for a JSON object of (key, column) pairs (one py4j call, where F.struct costs ~3 per column)."""
    return f"to_json(named_struct({', '.join(f'{_sql_string(key)}, {_sql_name(col)}' for key, col in fields)}))"


# R's write.csv writes a missing value as NA: read as missing in every column (a required one then reports it as
# a missing value); no column of the drop holds the text NA as a value.
_MISSING_TEXTS = "('', 'NA')"
# Values in a locale's format that the typed columns do not take: named as such, not as "unparseable".
_LOCALE_FORMATS = {
    DOUBLE: (r"^[+-]?[0-9]+,[0-9]+$", "decimal comma (expected a decimal point, e.g. 12.5)"),
    DATE: (r"^[0-9]{1,2}[./][0-9]{1,2}[./][0-9]{4}$", "date as DD.MM.YYYY or MM/DD/YYYY (expected YYYY-MM-DD)"),
}


def _has_text(column: str) -> str:
    """SQL: the field holds a value (not blank, not NA)."""
    return f"trim({_sql_name(column)}) NOT IN {_MISSING_TEXTS}"


def _parsed(column: str, kind: str) -> str:
    text = f"trim({_sql_name(column)})"
    if kind not in _SQL_TYPES:
        return f"CASE WHEN {_has_text(column)} THEN {_sql_name(column)} END"
    parsed = f"try_cast({text} AS {_SQL_TYPES[kind]})"
    return f"CASE WHEN {text} RLIKE {_sql_string(_PATTERNS[kind])} THEN {parsed} END" if kind in _PATTERNS else parsed


def _text(column: str) -> str:
    return f"_text_{column}"


def acceptable() -> Column:
    """True while a row has no problem."""
    return F.col(PROBLEM).isNull()


def parse_columns(text_df: DataFrame, raw_file: RawFile) -> DataFrame:
    """Text columns -> typed columns plus PROBLEM, the first problem of each row.

    Problems, first one wins: malformed line (wrong number of fields), unparseable value (a locale's decimal comma
    or date format named as such), missing required value (blank or NA), value out of range, then the file's
    cross-column rules (RawFile.rules). Every column is referenced, so Spark parses whole lines and sees malformed
    ones.
    The record of a problem row is the raw line when Spark kept it, else its fields as JSON.
    Written as SQL text, one select per step: built with Column functions, the ~80 columns of the seven files
    took ~8,000 py4j round trips, over a second of driver time before the first Spark job could start.
    """
    names = raw_file.column_names
    typed = text_df.selectExpr(*[f"{_parsed(name, kind)} AS {_sql_name(name)}" for name, kind in raw_file.columns],
                               *[f"{_sql_name(name)} AS {_sql_name(_text(name))}" for name in names],
                               _sql_name(CORRUPT_COL))
    corrupt = _sql_name(CORRUPT_COL)
    record = f"coalesce({corrupt}, {_to_json_sql([(name, _text(name)) for name in names])})"
    checks: list[tuple[str, str, str]] = [(f"{corrupt} IS NOT NULL", f"malformed line (expected {len(names)} fields)",
                                           "*")]
    for name in names:
        value, has_text = _sql_name(name), _has_text(_text(name))
        if raw_file.kind(name) in _LOCALE_FORMATS:
            pattern, reason = _LOCALE_FORMATS[raw_file.kind(name)]
            checks.append((f"{value} IS NULL AND trim({_sql_name(_text(name))}) RLIKE {_sql_string(pattern)}",
                           reason, name))
        checks.append((f"{has_text} AND {value} IS NULL", f"unparseable {raw_file.kind(name)}", name))
        if name in raw_file.required:
            checks.append((f"{value} IS NULL AND NOT coalesce({has_text}, false)", "missing value", name))
        if name in raw_file.ranges:
            low, high = raw_file.ranges[name]
            label = "negative value" if (low, high) == (0, 2**31 - 1) else f"out of range [{low}, {high}]"
            checks.append((f"{value} < {low} OR {value} > {high}", label, name))
    checks += [(condition, reason, column) for condition, reason, column in raw_file.rules]
    # CASE takes the first branch whose condition is true (null counts as false).
    first = "CASE " + " ".join(f"WHEN {condition} THEN named_struct('reason', {_sql_string(reason)}, "
                               f"'column', {_sql_string(column)})" for condition, reason, column in checks) + " END"
    return (typed.selectExpr("*", f"{first} AS _first")
            .selectExpr(*[_sql_name(name) for name in names],
                        "CASE WHEN _first IS NOT NULL THEN named_struct('reason', _first.reason, 'column', "
                        f"_first.column, 'record', {record}) END AS {_sql_name(PROBLEM)}"))


def quarantine_first(df: DataFrame, checks: Sequence[tuple[Column, str, str]], record_cols: Sequence[str]) -> DataFrame:
    """Give acceptable rows the first (condition, reason, column) whose condition holds; null counts as false."""
    first = F.coalesce(*[F.when(condition, F.struct(F.lit(reason).alias("reason"), F.lit(column).alias("column")))
                         for condition, reason, column in checks])
    # The record is rendered once, after the first problem is known, not once per check.
    new = F.when(F.col("_first").isNotNull(), F.struct(F.col("_first.reason").alias("reason"),
                                                       F.col("_first.column").alias("column"),
                                                       json_record(df, record_cols).alias("record")))
    return df.withColumn("_first", first).withColumn(PROBLEM, F.coalesce(F.col(PROBLEM), new)).drop("_first")


# Types json_record renders with SQL string functions; other types go through to_json (which leaves nulls out).
_PLAIN_JSON_TYPES = (T.IntegerType, T.LongType, T.ShortType, T.ByteType, T.BooleanType, T.DateType, T.StringType)
# regexp_replace arguments (Java regex, replacement): backslash-escape " and \, and show control characters as \ufffd.
_JSON_SPECIAL = _sql_string(r'(["\\])') + ", " + _sql_string(r'\\$1')
_CONTROL_CHARACTER = _sql_string(r'\p{Cntrl}') + ", " + _sql_string(r'\\ufffd')


def json_record(df: DataFrame, columns: Sequence[str]) -> Column:
    """The columns of df as a JSON object; a null value shows as null.

    Integers, booleans, dates and strings are rendered with format_string, which whole-stage code generation
    compiles into the surrounding stage in little code; to_json cannot be, and every step that may quarantine a
    row would cut the feature pass into separately generated stages (bench/RESULTS.md, "Prepare job").
    Strings escape quotes and backslashes; a control character shows as \\ufffd (records are for reading).
    """
    types = {field.name: field.dataType for field in df.schema.fields}
    if not all(isinstance(types[name], _PLAIN_JSON_TYPES) for name in columns):
        return F.expr(_to_json_sql([(name, name) for name in columns]))
    values = []
    for name in columns:
        value = _sql_name(name)
        if isinstance(types[name], T.StringType):
            value = f"regexp_replace(regexp_replace({value}, {_JSON_SPECIAL}), {_CONTROL_CHARACTER})"
        if isinstance(types[name], (T.StringType, T.DateType)):
            value = f"coalesce(concat('\"', {value}, '\"'), 'null')"
        values.append(value)
    template = "{" + ",".join(json.dumps(name).replace("%", "%%") + ":%s" for name in columns) + "}"
    return F.expr(f"format_string({_sql_string(template)}, {', '.join(values)})")


def quarantine_where(df: DataFrame, condition: Column, reason: str, column: str,
                     record_cols: Sequence[str]) -> DataFrame:
    return quarantine_first(df, [(condition, reason, column)], record_cols)


def quarantine_duplicates(df: DataFrame, keys: Sequence[str], record_cols: Sequence[str],
                          scope_after: Sequence[str] = (), label: str | None = None) -> DataFrame:
    """Quarantine every acceptable row whose key (per scope_after value) occurs more than once among them.

    The window partitions by keys then scope_after, so its sort also serves later windows ordered by the keys.
    All copies go: which one is right cannot be told, and keeping one would make the result order-dependent.
    """
    copies = F.count(F.when(countable_copy(keys), 1)).over(Window.partitionBy(*keys, *scope_after))
    return quarantine_copies(df, keys, copies, record_cols, label)


def countable_copy(keys: Sequence[str]) -> Column:
    """True for the rows that count as a copy of their key: acceptable, with every key column set."""
    return acceptable() & _keyed(keys)


def quarantine_copies(df: DataFrame, keys: Sequence[str], copies: Column, record_cols: Sequence[str],
                      label: str | None = None) -> DataFrame:
    """Quarantine every acceptable keyed row whose key has more than one copy (copies: a count of the
    countable_copy rows sharing the row's key, however the caller's window finds them)."""
    label = label or ",".join(keys)
    return quarantine_where(df, _keyed(keys) & (copies > 1), f"duplicate key ({label})", label, record_cols)


def _keyed(keys: Sequence[str]) -> Column:
    return reduce(operator.and_, [F.col(k).isNotNull() for k in keys])


def problem_columns() -> list[Column]:
    """PROBLEM flattened into REASON and REASON_COLUMN (for counting)."""
    return [F.col(f"{PROBLEM}.reason").alias(REASON), F.col(f"{PROBLEM}.column").alias(REASON_COLUMN)]


# --- thresholds and accounting ----------------------------------------------------------------------------------

def check_reject_fraction(file_name: str, input_rows: int, problems: Mapping[tuple[str, str], int],
                          examples: Mapping[tuple[str, str], Sequence[str]], max_fraction: float) -> None:
    """Fail when a file's quarantined share is above max_fraction; the error lists reasons, columns, examples."""
    rejected = sum(problems.values())
    if rejected == 0 or rejected <= max_fraction * input_rows:
        return
    raise RawInputError(
        f"{file_name}: {rejected} of {input_rows} rows ({rejected / max(input_rows, 1):.2%}) have row-level "
        f"problems, more than --max-reject-fraction {max_fraction} allows:\n"
        + describe_problems(problems, examples)
        + "\nFix the file, or raise --max-reject-fraction to quarantine these rows into rejected/.")


def check_plan_rows(file_name: str, input_rows: int, problems: Mapping[tuple[str, str], int],
                    examples: Mapping[tuple[str, str], Sequence[str]]) -> None:
    """Fail on any quarantined row of the plan (test.csv): every planned (Store, day) must get a forecast, so a
    quarantined row would only fail predict, after a whole training run."""
    rejected = sum(problems.values())
    if rejected == 0:
        return
    raise RawInputError(
        f"{file_name}: {rejected} of {input_rows} rows of the plan have row-level problems; every plan row must be "
        "forecast, so none can be quarantined (--max-reject-fraction does not apply to the plan):\n"
        + describe_problems(problems, examples)
        + f"\nFix {file_name} (or the file its rows are looked up in) and land the drop again.")


def describe_problems(problems: Mapping[tuple[str, str], int],
                      examples: Mapping[tuple[str, str], Sequence[str]]) -> str:
    lines = []
    for (reason, column), count in sorted(problems.items(), key=lambda item: -item[1]):
        shown = "; ".join(examples.get((reason, column), [])[:EXAMPLES_PER_PROBLEM])
        lines.append(f"  - {reason} in column '{column}': {count} rows, e.g. {shown}")
    return "\n".join(lines)


class AccountingError(RuntimeError):
    """Rows were lost or duplicated between reading and writing: the counts do not add up."""


def check_accounting(file_name: str, input_rows: int, outcomes: Mapping[str, int]) -> None:
    """Every input row must end in exactly one outcome (a split, an exclusion or the quarantine)."""
    accounted = sum(outcomes.values())
    if accounted != input_rows:
        raise AccountingError(
            f"{file_name}: {input_rows} rows read but {accounted} accounted for ({dict(outcomes)}): "
            f"{'lost' if accounted < input_rows else 'duplicated'} {abs(input_rows - accounted)} rows, "
            "most likely in a join. This is a bug in prepare; the output was not committed.")


def examples_by_problem(rows: Iterable) -> dict[tuple[str, str], list[str]]:
    """Group collected (reason, column, record) rows into {(reason, column): [record, ...]}."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        grouped.setdefault((row[0], row[1]), []).append(row[2])
    return grouped


def read_text_csv(spark: SparkSession, uri: str, raw_file: RawFile) -> DataFrame:
    """The file as text columns; malformed lines land in CORRUPT_COL (header already checked by parse_header)."""
    text = spark.read.csv(storage.spark_uri(uri), schema=raw_file.text_schema(), header=True, mode="PERMISSIVE",
                          columnNameOfCorruptRecord=CORRUPT_COL, enforceSchema=True, encoding="UTF-8")
    # A DOS end-of-file Ctrl-Z right after the last field (no line end before it) is read into that field; the
    # inspection allows it only as the file's last bytes (drop_manifest.FileDigest), so only the last column can
    # hold it. On a line of its own the CSV parser skips it as whitespace.
    last = raw_file.column_names[-1]
    return text.withColumn(last, F.regexp_replace(last, "\u001a+$", ""))
