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
from rossmann_jobs.features.raw_schemas import CORRUPT_COL, DATE, DOUBLE, FLAG, INT, RawFile

# A row's first problem, struct<reason, column, record>; null while the row is acceptable. Each quarantine step
# refers to it once (coalesce(problem, new problem)), so chained steps keep the query plan linear in size.
PROBLEM = "_problem"
REASON, REASON_COLUMN = "_reason", "_reason_column"   # its fields as flat columns, for counting

# Spark's try_cast to INT is already strict (optional sign, ASCII digits, no fraction, no overflow); its DOUBLE
# and DATE casts are not ("Infinity", "1d"; "2015", "2015-7-1 x"), so those values must match a pattern first.
_PATTERNS = {
    DOUBLE: r"^[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?$",
    # A date, or a date with a zero time part, as pandas and Spark write a timestamp at midnight.
    DATE: r"^[0-9]{4}-[0-9]{2}-[0-9]{2}([ T]00:00(:00([.]0+)?)?)?$",
}
# An integer written as a float with a zero fraction (pandas upcasts an integer column with a missing value):
# the same integer. Any other fraction changes the value and stays unparseable.
_ZERO_FRACTION = r"^[+-]?[0-9]+[.]0*$"
_SQL_TYPES = {INT: "INT", FLAG: "INT", DOUBLE: "DOUBLE", DATE: "DATE"}
_KIND_LABELS = {FLAG: "flag (0/1, true/false)"}
EXAMPLES_PER_PROBLEM = 3
GZIP_MAGIC = b"\x1f\x8b"


class RawInputError(ValueError):
    """The raw drop cannot be prepared; the message names the file, the column and example rows."""


# --- file level -------------------------------------------------------------------------------------------------

def parse_header(raw_file: RawFile, head: bytes) -> list[str]:
    """Check the first line of a file (UTF-8, optional BOM, LF or CRLF); return its field names, as written, or raise.

    Columns are found by name, in any order: every column a feature reads must be there (RawFile.header_columns),
    each name at most once; a column no feature reads may be absent, and a column the drop does not define is
    ignored (header_report lists both).
    """
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
    known = set(raw_file.column_names)
    twice = sorted({name for name in header if name in known and header.count(name) > 1})
    if twice:
        raise RawInputError(f"{raw_file.name}: the header {first_line[:300]!r} names column(s) {twice} more than "
                            "once, so which field holds the value cannot be told. Re-export the file with each "
                            "column once.")
    missing = [name for name in raw_file.header_columns if name not in header]
    if missing:
        extra = [name for name in header if name not in known]
        hints = [f"'{name}' differs from '{got}' only in case or spacing" for name in missing for got in extra
                 if got.replace(" ", "").lower() == name.lower()]
        raise RawInputError(
            f"{raw_file.name}: missing column(s) {missing}: the header {first_line[:300]!r} does not name them"
            + (f" ({'; '.join(hints)}: column names are matched exactly)" if hints else "")
            + f". The file must have a header naming at least {','.join(raw_file.header_columns)} (in any order; "
              "other columns are ignored).")
    return header


def header_report(raw_file: RawFile, header: Sequence[str]) -> dict[str, list[str]]:
    """What a header holds besides the columns read: ignored (not a column of the drop) and absent (an unused
    column the file lacks, read as missing); empty lists left out."""
    report = {"ignored": [name or f"(unnamed column {i + 1})" for i, name in enumerate(header)
                          if name not in raw_file.column_names],
              "absent": [name for name in raw_file.column_names if name not in header]}
    return {key: names for key, names in report.items() if names}


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
# Values in a format that the typed columns do not take, because reading them would guess: named as such, not as
# "unparseable".
_LOCALE_FORMATS = {
    DOUBLE: ((r"^[+-]?[0-9]+,[0-9]+$", "decimal comma (expected a decimal point, e.g. 12.5)"),),
    DATE: ((r"^[0-9]{1,2}[./][0-9]{1,2}[./][0-9]{4}$", "date as DD.MM.YYYY or MM/DD/YYYY (expected YYYY-MM-DD)"),
           (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{1,2}:[0-9]{2}",
            "date with a time of day (expected YYYY-MM-DD, or a zero time part)")),
}


def _has_text(column: str) -> str:
    """SQL: the field holds a value (not blank, not NA)."""
    return f"trim({_sql_name(column)}) NOT IN {_MISSING_TEXTS}"


def _parsed(column: str, kind: str) -> str:
    """SQL: the typed value of a text field, null when it does not parse; surrounding spaces never count (fixed-width
    exports pad numbers and text)."""
    text = f"trim({_sql_name(column)})"
    if kind not in _SQL_TYPES:
        return f"CASE WHEN {_has_text(column)} THEN {text} END"
    if kind in _PATTERNS:
        return (f"CASE WHEN {text} RLIKE {_sql_string(_PATTERNS[kind])} "
                f"THEN try_cast(substr({text}, 1, 10) AS DATE) END" if kind == DATE else
                f"CASE WHEN {text} RLIKE {_sql_string(_PATTERNS[kind])} THEN try_cast({text} AS DOUBLE) END")
    whole = (f"CASE WHEN {text} RLIKE {_sql_string(_ZERO_FRACTION)} THEN try_cast(substring_index({text}, '.', 1) "
             f"AS INT) ELSE try_cast({text} AS INT) END")
    if kind == FLAG:
        return f"CASE lower({text}) WHEN 'true' THEN 1 WHEN 'false' THEN 0 ELSE {whole} END"
    return whole


def _text(column: str) -> str:
    return f"_text_{column}"


def acceptable() -> Column:
    """True while a row has no problem."""
    return F.col(PROBLEM).isNull()


def parse_columns(text_df: DataFrame, raw_file: RawFile, fields: int | None = None) -> DataFrame:
    """Text columns (read_text_csv) -> typed columns plus PROBLEM, the first problem of each row.

    Problems, first one wins: malformed line (wrong number of fields; fields: the header's, default every column of
    text_df), unparseable value (a locale's decimal comma or date format, or a date with a time of day, named as
    such), missing required value (blank or NA), value out of range, then the file's cross-column rules
    (RawFile.rules). A column no feature reads (RawFile.unused) has no problems: a value that does not parse or
    lies out of range is read as missing (prepare counts them). Every column is referenced, the ignored ones too,
    so Spark parses whole lines and sees malformed ones.
    The record of a problem row is the raw line when Spark kept it, else its fields as JSON.
    Written as SQL text, one select per step: built with Column functions, the ~80 columns of the seven files
    took ~8,000 py4j round trips, over a second of driver time before the first Spark job could start.
    """
    names = raw_file.column_names
    ignored = [name for name in text_df.columns if name not in names and name != CORRUPT_COL]
    fields = fields or len(names) + len(ignored)

    def typed_value(name: str, kind: str) -> str:
        parsed = _parsed(name, kind)
        if name in raw_file.unused and name in raw_file.ranges:
            low, high = raw_file.ranges[name]
            return f"CASE WHEN {parsed} BETWEEN {low} AND {high} THEN {parsed} END"
        return parsed

    typed = text_df.selectExpr(*[f"{typed_value(name, kind)} AS {_sql_name(name)}" for name, kind in raw_file.columns],
                               *[f"{_sql_name(name)} AS {_sql_name(_text(name))}" for name in [*names, *ignored]],
                               _sql_name(CORRUPT_COL))
    corrupt = _sql_name(CORRUPT_COL)
    record = f"coalesce({corrupt}, {_to_json_sql([(name, _text(name)) for name in [*names, *ignored]])})"
    checks: list[tuple[str, str, str]] = [(f"{corrupt} IS NOT NULL", f"malformed line (expected {fields} fields)",
                                           "*")]
    for name in raw_file.header_columns:
        kind = raw_file.kind(name)
        value, has_text = _sql_name(name), _has_text(_text(name))
        for pattern, reason in _LOCALE_FORMATS.get(kind, ()):
            checks.append((f"{value} IS NULL AND trim({_sql_name(_text(name))}) RLIKE {_sql_string(pattern)}",
                           reason, name))
        checks.append((f"{has_text} AND {value} IS NULL", f"unparseable {_KIND_LABELS.get(kind, kind)}", name))
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

# The reasons about a value as written (parse_columns), for which the values' patterns are shown.
VALUE_REASONS = ("unparseable", "out of range", "negative value", "decimal comma", "date as", "date with")
# Per (reason, column): the commonest shapes of the values that failed, as (shape, example value, rows).
Patterns = Mapping[tuple[str, str], Sequence[tuple[str, str, int]]]


def over_reject_fraction(input_rows: int, rejected: int, max_fraction: float) -> bool:
    return rejected > 0 and rejected > max_fraction * input_rows


def check_reject_fraction(file_name: str, input_rows: int, problems: Mapping[tuple[str, str], int],
                          examples: Mapping[tuple[str, str], Sequence[str]], max_fraction: float,
                          patterns: Patterns | None = None) -> None:
    """Fail when a file's quarantined share is above max_fraction; the error lists reasons, columns, the values'
    patterns and examples."""
    rejected = sum(problems.values())
    if not over_reject_fraction(input_rows, rejected, max_fraction):
        return
    raise RawInputError(
        f"{file_name}: {rejected} of {input_rows} rows ({rejected / max(input_rows, 1):.2%}) have row-level "
        f"problems, more than --max-reject-fraction {max_fraction} allows:\n"
        + describe_problems(problems, examples, patterns)
        + "\nFix the file, or raise --max-reject-fraction to quarantine these rows into rejected/.")


def check_plan_rows(file_name: str, input_rows: int, problems: Mapping[tuple[str, str], int],
                    examples: Mapping[tuple[str, str], Sequence[str]], patterns: Patterns | None = None) -> None:
    """Fail on any quarantined row of the plan (test.csv): every planned (Store, day) must get a forecast, so a
    quarantined row would only fail predict, after a whole training run."""
    rejected = sum(problems.values())
    if rejected == 0:
        return
    raise RawInputError(
        f"{file_name}: {rejected} of {input_rows} rows of the plan have row-level problems; every plan row must be "
        "forecast, so none can be quarantined (--max-reject-fraction does not apply to the plan):\n"
        + describe_problems(problems, examples, patterns)
        + f"\nFix {file_name} (or the file its rows are looked up in) and land the drop again.")


def describe_problems(problems: Mapping[tuple[str, str], int],
                      examples: Mapping[tuple[str, str], Sequence[str]], patterns: Patterns | None = None) -> str:
    lines = []
    for (reason, column), count in sorted(problems.items(), key=lambda item: -item[1]):
        shown = "; ".join(examples.get((reason, column), [])[:EXAMPLES_PER_PROBLEM])
        values = (patterns or {}).get((reason, column)) if reason.startswith(VALUE_REASONS) else None
        like = (" (values like " + ", ".join(f"{shape!r} e.g. {example!r}: {rows} rows"
                                             for shape, example, rows in values) + ")") if values else ""
        lines.append(f"  - {reason} in column '{column}': {count} rows{like}, e.g. {shown}")
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


def read_header(uri: str, raw_file: RawFile) -> list[str]:
    """The file's header fields (parse_header over its first 64 KiB)."""
    filesys, path = storage.filesystem(uri)

    def head() -> bytes:
        with filesys.open_input_stream(path) as stream:
            return stream.read(HEAD_BYTES)
    return parse_header(raw_file, storage.with_retries("read", uri, head))


HEAD_BYTES = 64 * 1024


def read_text_csv(spark: SparkSession, uri: str, raw_file: RawFile, header: Sequence[str] | None = None) -> DataFrame:
    """The file as text columns, found by header name: raw_file's columns in their order (an absent unused column
    null), then the ignored columns, then CORRUPT_COL, where Spark puts a malformed line.

    header: the file's header fields as parse_header returned them (read from the file when not given). Spark reads
    the fields by position, then each column is taken by its header name.
    """
    header = list(header) if header is not None else read_header(uri, raw_file)
    # Each field under its header name where that is a usable one (so Spark's header check finds the names it
    # expects), else under its position.
    positional = [name if name and header.count(name) == 1 and _ignored_name(name, i, set()) == name
                  else f"_field_{i}" for i, name in enumerate(header)]
    text = spark.read.csv(storage.spark_uri(uri), schema=raw_file.text_schema(positional), header=True,
                          mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT_COL, enforceSchema=True,
                          encoding="UTF-8")
    by_name = dict(zip(header, positional))
    known = [f"{_sql_name(by_name[name])} AS {_sql_name(name)}" if name in by_name
             else f"CAST(NULL AS STRING) AS {_sql_name(name)}" for name in raw_file.column_names]
    ignored, taken = [], set(raw_file.column_names)
    for i, (name, field) in enumerate(zip(header, positional)):
        if name not in raw_file.column_names:
            alias = _ignored_name(name, i, taken)
            taken.add(alias)
            ignored.append(f"{_sql_name(field)} AS {_sql_name(alias)}")
    # A DOS end-of-file Ctrl-Z right after the last field (no line end before it) is read into that field; the
    # inspection allows it only as the file's last bytes (drop_manifest.FileDigest), so only the last field can
    # hold it. On a line of its own the CSV parser skips it as whitespace.
    last = positional[-1]
    return (text.withColumn(last, F.regexp_replace(last, "\u001a+$", ""))
            .selectExpr(*known, *ignored, _sql_name(CORRUPT_COL)))


def _ignored_name(name: str, position: int, taken: set[str]) -> str:
    """The text column of an ignored header field: its name, unless blank (pandas' index), taken or one of ours."""
    if (not name or name in taken or name.startswith(("_text_", "_field_"))
            or name in (CORRUPT_COL, PROBLEM, "_first")):
        return f"column {position + 1}"
    return name
