"""Unit tests of raw-input validation: headers, typed parsing with problem flags, duplicates, thresholds, accounting."""
from __future__ import annotations

import hashlib
import json
from datetime import date

import pytest
from pyspark.sql import functions as F

from rossmann_jobs.features.raw_schemas import CORRUPT_COL, STORE, TEST, TRAIN
from rossmann_jobs.features.validate import (
    PROBLEM,
    AccountingError,
    FileDigest,
    RawInputError,
    check_accounting,
    check_reject_fraction,
    header_report,
    json_record,
    parse_columns,
    parse_header,
    problem_columns,
    quarantine_duplicates,
    read_text_csv,
)

TRAIN_HEADER = "Store,DayOfWeek,Date,Sales,Customers,Open,Promo,StateHoliday,SchoolHoliday"


# --- headers ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("head", [
    TRAIN_HEADER + "\n1,5,2015-07-31,5263,555,1,1,0,1\n",
    "\ufeff" + TRAIN_HEADER + "\r\n1,5,2015-07-31,5263,555,1,1,0,1\r\n",
    TRAIN_HEADER,
])
def test_header_accepts_bom_crlf_and_a_header_only_head(head):
    assert parse_header(TRAIN, head.encode("utf-8")) == TRAIN.column_names


def test_header_names_a_missing_column_and_ignores_extra_ones():
    head = b"Store,DayOfWeek,Date,Sales,Customers,Open,StateHoliday,SchoolHoliday,Weather\n"
    with pytest.raises(RawInputError) as error:
        parse_header(TRAIN, head)
    message = str(error.value)
    assert message.startswith("train.csv: missing column(s) ['Promo']")
    assert "other columns are ignored" in message
    promo = head.replace(b"Open,", b"Open,Promo,")
    assert parse_header(TRAIN, promo)[-1] == "Weather"
    assert header_report(TRAIN, parse_header(TRAIN, promo)) == {"ignored": ["Weather"]}


def test_header_may_lack_a_column_no_feature_reads():
    header = parse_header(TRAIN, b"Store,DayOfWeek,Date,Sales,Open,Promo,StateHoliday,SchoolHoliday\n")
    assert header_report(TRAIN, header) == {"absent": ["Customers"]}


def test_header_names_a_column_given_twice_and_a_case_difference():
    with pytest.raises(RawInputError, match=r"train.csv: the header .* names column\(s\) \['Store'\] more than once"):
        parse_header(TRAIN, (TRAIN_HEADER + ",Store\n").encode())
    with pytest.raises(RawInputError, match=r"train.csv: missing column\(s\) \['Sales'\].*'Sales' differs from "
                                            r"'sales' only in case"):
        parse_header(TRAIN, TRAIN_HEADER.replace("Sales", "sales").encode())


def test_header_detects_a_wrong_delimiter():
    with pytest.raises(RawInputError, match=r"train.csv: wrong delimiter: .* semicolons"):
        parse_header(TRAIN, TRAIN_HEADER.replace(",", ";").encode() + b"\n1;5\n")
    with pytest.raises(RawInputError, match=r"tabs"):
        parse_header(TRAIN, TRAIN_HEADER.replace(",", "\t").encode() + b"\n")


def test_header_accepts_columns_in_any_order():
    head = b"DayOfWeek,Store,Date,Sales,Customers,Open,Promo,StateHoliday,SchoolHoliday\n"
    assert parse_header(TRAIN, head) == ["DayOfWeek", "Store", *TRAIN.column_names[2:]]


def test_gzip_compressed_file_is_refused_with_what_to_do():
    import gzip

    with pytest.raises(RawInputError, match=r"train.csv: the file is gzip-compressed; .*gunzip"):
        parse_header(TRAIN, gzip.compress((TRAIN_HEADER + "\n").encode()))


def test_empty_file_is_an_error():
    with pytest.raises(RawInputError, match="train.csv: the file is empty"):
        parse_header(TRAIN, b"")


@pytest.mark.parametrize("text", [
    b"\xef\xbb\xbfa,b\r\n1,2\r\n\r\n3,4\n5,6",    # BOM, CRLF, a blank line, no final newline
    b"a,b\n1,2\n,\n \t\n3,4\n\n",                # an empty-valued row counts, a whitespace line does not
    b"a,b\r1,2\r\r3,4\r",                         # CR-only line ends (Excel for Mac)
    b"a,b\r\n1,2\r\n3,4\r\n\x1a",                  # a DOS end-of-file Ctrl-Z on a line of its own
    b"a,b\n1,2\n3,4\x1a\x1a",                       # ... right after the last field
    b"a,b\n1,2\n\x0b\x0c \n3,4\n",                  # a line of control whitespace: blank for both
])
def test_file_digest_counts_rows_as_spark_reads_them(spark, tmp_path, text):
    digest = FileDigest(head_bytes=4)
    for start in range(0, len(text), 3):          # chunks split lines and CRLF pairs
        digest.update(text[start:start + 3])
    assert (digest.sha256, digest.size, digest.head) == (hashlib.sha256(text).hexdigest(), len(text), text[:4])
    path = tmp_path / "file.csv"
    path.write_bytes(text)
    assert digest.data_rows == spark.read.csv(str(path), header=True, schema="a string, b string").count()


# --- typed parsing ----------------------------------------------------------------------------------------------

def parse_lines(spark, tmp_path, raw_file, lines):
    """Write lines under the file's header, read them as Spark does in the job, parse; rows by first field."""
    path = tmp_path / raw_file.name
    path.write_text("\n".join([",".join(raw_file.column_names), *lines]) + "\n")
    text = spark.read.csv(str(path), schema=raw_file.text_schema(), header=True, mode="PERMISSIVE",
                          columnNameOfCorruptRecord=CORRUPT_COL, enforceSchema=True)
    parsed = parse_columns(text, raw_file)
    # Select a single column besides the problem: Spark's CSV column pruning must not hide malformed lines.
    return parsed.select("Date", *problem_columns(), F.col(f"{PROBLEM}.record").alias("record")).collect()


def test_parse_flags_each_row_problem_with_its_column_and_record(spark, tmp_path):
    lines = [
        "1,5,2015-07-31,5263,555,1,1,0,1",     # fine
        "2,5,2015-07-31,52x3,555,1,1,0,1",     # unparseable Sales
        "3,5,2015-02-30,5263,555,1,1,0,1",     # impossible date
        "4,5,2015-7-31,5263,555,1,1,0,1",      # date not in yyyy-MM-dd
        "5,5,2015-07-31,-12,555,1,1,0,1",      # negative Sales
        "6,5,2015-07-31,,555,1,1,0,1",         # missing Sales
        "7,5,2015-07-31,5263,555,1,1,0",       # a field short
        "8,9,2015-07-31,5263,555,1,1,0,1",     # DayOfWeek out of range
        "9,5,2015-07-31,12.5,555,1,1,0,1",     # not an integer
        "10,5,2015-07-31, 77 ,555,1,1,0,1",    # surrounding blanks are fine
        "11,5,2015-07-31,5263,555,2,1,0,1",    # Open not in {0, 1}
        "12,5,2015-07-31,5263,555,1,1,0,-1",   # SchoolHoliday not in {0, 1}
        "13,5,2015-07-31,1e3,555,1,1,0,1",     # an exponent is not an integer
        "14,5,2015-07-31,2147483648,555,1,1,0,1",  # overflows int
        "15,5,2015-07-31,+0042,555,1,1,0,1",   # sign and leading zeros are fine
        "16,5,2015-07-31,5263,555,0,1,0,1",    # sales on a closed day
        "17,7,2015-07-26,0,0,0,0,0,0",         # a closed day without sales is fine
        "18,5,31.07.2015,5263,555,1,1,0,1",    # a day-first date
        "19,5,2015-07-31,NA,555,1,1,0,1",      # R's NA: missing
    ]
    rows = parse_lines(spark, tmp_path, TRAIN, lines)
    got = [(r._reason, r._reason_column) for r in rows]
    assert got == [
        (None, None),
        ("unparseable int", "Sales"),
        ("unparseable date", "Date"),
        ("unparseable date", "Date"),
        ("negative value", "Sales"),
        ("missing value", "Sales"),
        ("malformed line (expected 9 fields)", "*"),
        ("out of range [1, 7]", "DayOfWeek"),
        ("unparseable int", "Sales"),
        (None, None),
        ("out of range [0, 1]", "Open"),
        ("out of range [0, 1]", "SchoolHoliday"),
        ("unparseable int", "Sales"),
        ("unparseable int", "Sales"),
        (None, None),
        ("sales on a closed day (Open 0, Sales > 0)", "Sales"),
        (None, None),
        ("date as DD.MM.YYYY or MM/DD/YYYY (expected YYYY-MM-DD)", "Date"),
        ("missing value", "Sales"),
    ]
    assert rows[6].record == lines[6]                       # Spark kept the raw line
    assert '"Sales":"52x3"' in rows[1].record               # else the fields as text
    assert rows[0].Date == date(2015, 7, 31) and rows[0].record is None


def test_parse_allows_a_blank_test_open_but_not_a_blank_store(spark, tmp_path):
    rows = parse_lines(spark, tmp_path, TEST, ["1,1,4,2015-09-17,,1,0,0", "2,,4,2015-09-17,1,1,0,0"])
    assert [(r._reason, r._reason_column) for r in rows] == [(None, None), ("missing value", "Store")]


def test_parse_reads_na_as_missing_and_names_a_decimal_comma(spark, tmp_path):
    path = tmp_path / "store.csv"
    path.write_text(",".join(STORE.column_names) + "\n" + "\n".join([
        '1,"a","c",NA,NA,NA,0,NA,NA,NA',                   # R's write.csv: every missing value NA
        '2,"a","c","1270,5",9,2008,0,,,',                  # a decimal comma
        '3,NA,"c",1270,9,2008,0,,,']) + "\n")              # NA in a required column: missing
    text = spark.read.csv(str(path), schema=STORE.text_schema(), header=True, mode="PERMISSIVE",
                          columnNameOfCorruptRecord=CORRUPT_COL, enforceSchema=True)
    rows = parse_columns(text, STORE).select("CompetitionDistance", "PromoInterval", *problem_columns()).collect()
    assert [(r._reason, r._reason_column) for r in rows] == [
        (None, None), ("decimal comma (expected a decimal point, e.g. 12.5)", "CompetitionDistance"),
        ("missing value", "StoreType")]
    assert rows[0].CompetitionDistance is None and rows[0].PromoInterval is None


def test_parse_unquotes_quoted_values(spark, tmp_path):
    rows = parse_lines(spark, tmp_path, TRAIN, ['1,5,2015-07-31,5263,555,1,1,"0",1'])
    assert rows[0]._reason is None


def test_parse_reads_values_written_another_way_as_the_clean_ones(spark, tmp_path):
    """Booleans, integers with a zero fraction, padding and a zero time part: the value the clean line has."""
    clean = "1,5,2015-07-31,5263,555,1,1,0,1"
    lines = [clean,
             "1,5,2015-07-31,5263,555,True,true,0,TRUE",            # pandas, Spark and R booleans
             "1.0,5.0,2015-07-31,5263.0,555.0,1.0,1.,0,1.00",       # pandas' float upcast
             " 1 ,5,2015-07-31 , 5263,555,1 ,1, 0 ,1",              # fixed-width padding
             "1,5,2015-07-31 00:00:00,5263,555,1,1,0,1",            # a timestamp at midnight
             "1,5,2015-07-31T00:00:00.000,5263,555,1,1,0,1",
             "1,5,2015-07-31 00:00,5263,555,1,1,0,1"]
    path = tmp_path / "train.csv"
    path.write_text("\n".join([TRAIN_HEADER, *lines]) + "\n")
    rows = parse_columns(read_text_csv(spark, str(path), TRAIN), TRAIN).collect()
    assert [row.asDict() for row in rows] == [rows[0].asDict()] * len(lines)
    assert rows[0][PROBLEM] is None and rows[0].Open == 1 and rows[0].StateHoliday == "0"


def test_parse_keeps_refusing_what_changes_meaning(spark, tmp_path):
    lines = [
        "1,5,2015-07-31,5263.5,555,1,1,0,1",          # a fraction: not an integer
        "2,5,2015-07-31,5263,555,yes,1,0,1",          # yes/no is not one of the flag spellings
        "3,5,2015-07-31 13:30:00,5263,555,1,1,0,1",   # a time of day: which day is meant depends on the zone
        "4,5,2015-07-31,5263,555,2.0,1,0,1",          # 2 is out of range, however written
        "5,5,2015-07-31,5263,555,0.5,1,0,1",
        "6,5,2015-07-31,5263,n/a,1,1,0,1",            # Customers (unused): read as missing, no problem
        "7,5,2015-07-31,5263,-3,1,1,0,1",
    ]
    rows = parse_lines(spark, tmp_path, TRAIN, lines)
    assert [(r._reason, r._reason_column) for r in rows] == [
        ("unparseable int", "Sales"),
        ("unparseable flag (0/1, true/false)", "Open"),
        ("date with a time of day (expected YYYY-MM-DD, or a zero time part)", "Date"),
        ("out of range [0, 1]", "Open"),
        ("unparseable flag (0/1, true/false)", "Open"),
        (None, None),
        (None, None),
    ]


def test_read_text_csv_finds_columns_by_header_name(spark, tmp_path):
    path = tmp_path / "store.csv"
    header = list(reversed(STORE.column_names))
    path.write_text(",".join(["", *header]) + "\n" + "0," + ",".join(
        {"Store": "7", "StoreType": "a  ", "Assortment": "c", "Promo2": "1"}.get(c, "") for c in header) + "\n")
    text = read_text_csv(spark, str(path), STORE)
    assert text.columns == [*STORE.column_names, "column 1", CORRUPT_COL]
    row = parse_columns(text, STORE).collect()[0]
    assert (row.Store, row.StoreType, row.Assortment, row.Promo2, row[PROBLEM]) == (7, "a", "c", 1, None)


# --- duplicates -------------------------------------------------------------------------------------------------

def test_every_copy_of_a_duplicate_key_is_quarantined_and_bad_rows_do_not_count(spark):
    problem = "struct<reason:string,column:string,record:string>"
    rows = [(1, "2015-07-31", None), (1, "2015-07-31", None), (2, "2015-07-31", None), (2, "2015-07-31", "bad"),
            (None, "2015-07-31", None), (None, "2015-07-31", None)]
    df = spark.createDataFrame(rows, "Store int, Date string, bad string").withColumn(
        PROBLEM, F.when(F.col("bad").isNotNull(), F.struct(F.lit("unparseable int").alias("reason"),
                                                             F.lit("Sales").alias("column"),
                                                             F.lit("x").alias("record"))).cast(problem))
    out = quarantine_duplicates(df, ["Store", "Date"], ["Store", "Date"]).select(
        "Store", "bad", *problem_columns()).collect()
    got = sorted((r.Store or 0, r.bad or "", r._reason or "") for r in out)
    assert got == [(0, "", ""), (0, "", ""), (1, "", "duplicate key (Store,Date)"),
                   (1, "", "duplicate key (Store,Date)"), (2, "", ""), (2, "bad", "unparseable int")]


# --- thresholds and accounting ----------------------------------------------------------------------------------

def test_reject_fraction_above_the_limit_names_file_reason_column_and_examples():
    problems = {("unparseable int", "Sales"): 3, ("duplicate key (Store,Date)", "Store,Date"): 1}
    examples = {("unparseable int", "Sales"): ['{"Store":"2","Sales":"52x3"}']}
    check_reject_fraction("train.csv", 4000, problems, examples, max_fraction=0.001)   # 4 <= 4: quarantined
    with pytest.raises(RawInputError) as error:
        check_reject_fraction("train.csv", 3999, problems, examples, max_fraction=0.001)
    message = str(error.value)
    assert message.startswith("train.csv: 4 of 3999 rows")
    assert "unparseable int in column 'Sales': 3 rows, e.g. {\"Store\":\"2\",\"Sales\":\"52x3\"}" in message
    assert "duplicate key (Store,Date) in column 'Store,Date': 1 rows" in message


def test_the_error_shows_the_patterns_of_the_values_that_failed():
    problems = {("unparseable flag (0/1, true/false)", "Open"): 7, ("Store not in store.csv", "Store"): 2}
    examples = {("unparseable flag (0/1, true/false)", "Open"): ['{"Store":"1","Open":"yes"}']}
    patterns = {("unparseable flag (0/1, true/false)", "Open"): [("aaa", "yes", 5), ("aa", "no", 2)],
                ("Store not in store.csv", "Store"): [("9", "3", 2)]}
    with pytest.raises(RawInputError) as error:
        check_reject_fraction("train.csv", 9, problems, examples, 0.001, patterns)
    message = str(error.value)
    assert ("unparseable flag (0/1, true/false) in column 'Open': 7 rows (values like 'aaa' e.g. 'yes': 5 rows, "
            "'aa' e.g. 'no': 2 rows), e.g. {\"Store\":\"1\",\"Open\":\"yes\"}") in message
    assert "Store not in store.csv in column 'Store': 2 rows, e.g." in message   # a lookup miss: no value pattern


def test_accounting_fails_with_the_counts_when_rows_are_lost_or_duplicated():
    check_accounting("train.csv", 10, {"train": 7, "quarantined": 3})
    with pytest.raises(AccountingError, match=r"train.csv: 10 rows read but 9 accounted for .* lost 1 rows"):
        check_accounting("train.csv", 10, {"train": 6, "quarantined": 3})
    with pytest.raises(AccountingError, match="duplicated 2 rows"):
        check_accounting("train.csv", 10, {"train": 9, "quarantined": 3})


# --- rejected records -------------------------------------------------------------------------------------------

def test_json_record_is_the_row_as_json_with_nulls_and_escaped_strings(spark):
    rows = [(1, date(2015, 7, 31), "a", True), (None, None, None, None), (-5, date(1900, 1, 1), 'q"uo\\te', False),
            (2, date(2015, 1, 1), "tab\there", None)]
    df = spark.createDataFrame(rows, "Store int, Date date, StateHoliday string, Flag boolean")
    records = [json.loads(row.record) for row in df.select(json_record(df, df.columns).alias("record")).collect()]
    assert records == [
        {"Store": 1, "Date": "2015-07-31", "StateHoliday": "a", "Flag": True},
        {"Store": None, "Date": None, "StateHoliday": None, "Flag": None},
        {"Store": -5, "Date": "1900-01-01", "StateHoliday": 'q"uo\\te', "Flag": False},
        {"Store": 2, "Date": "2015-01-01", "StateHoliday": "tab\ufffdhere", "Flag": None},   # control character
    ]


def test_json_record_of_other_types_is_to_json(spark):
    df = spark.createDataFrame([(1, 2.5), (2, None)], "Store int, CompetitionDistance double")
    records = [row.record for row in df.select(json_record(df, df.columns).alias("record")).collect()]
    assert records == ['{"Store":1,"CompetitionDistance":2.5}', '{"Store":2}']
