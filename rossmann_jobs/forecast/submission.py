"""The Kaggle submission (Id,Sales): checks that it has exactly one row per test Id, and its CSV rendering."""
from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.forecast.inputs import ForecastInputError

EXAMPLES = 5


class SubmissionCheckError(RuntimeError):
    """The forecast does not account for every test row exactly once; the message lists counts and examples."""


def duplicate_ids(df: DataFrame) -> DataFrame:
    return df.groupBy("Id").agg(F.count(F.lit(1)).alias("copies")).filter(F.col("copies") > 1)


def _examples(df: DataFrame) -> list:
    return [row["Id"] for row in df.select("Id").orderBy("Id").limit(EXAMPLES).collect()]


def check_unique_test_ids(test: DataFrame, source: str) -> None:
    """The input's Ids must be unique, or no submission can have one row per Id."""
    duplicates = duplicate_ids(test)
    if duplicates.limit(1).count():
        raise ForecastInputError(f"{source}: column Id has {duplicates.count()} duplicated value(s), e.g. Ids "
                                 f"{_examples(duplicates)}. Each test row needs its own Id.")


def check_raw_test_ids(raw_ids: DataFrame, test_ids: DataFrame, raw_source: str, test_source: str,
                       rejected_uri: str) -> None:
    """Every Id of the raw test.csv (RawId text, Id int) must be in the prepared test split, and nothing else: the
    submission must answer the whole file, so a row prepare quarantined fails the forecast instead of vanishing."""
    joined = raw_ids.join(test_ids.select("Id", F.lit(True).alias("prepared")), "Id", "full_outer")
    missing = joined.filter(F.col("prepared").isNull()).select("Id", "RawId").distinct()
    extra = joined.filter(F.col("RawId").isNull() & F.col("prepared")).select("Id")
    counts = {"missing": missing.count(), "extra": extra.count()}
    if counts["missing"]:
        examples = [row["RawId"] for row in missing.orderBy(F.col("Id").asc_nulls_first(), "RawId")
                    .limit(EXAMPLES).collect()]
        raise ForecastInputError(
            f"{raw_source}: {counts['missing']} Id(s) are not in the prepared test split {test_source}, e.g. Ids "
            f"{examples}; the submission needs every one. Prepare quarantined them (or they are dated on or before "
            f"the as-of date): see the records in {rejected_uri}/, fix the drop and re-run prepare.")
    if counts["extra"]:
        raise ForecastInputError(
            f"{test_source}: {counts['extra']} Id(s) are not in {raw_source}, e.g. Ids {_examples(extra)}: --raw is "
            "not the drop these features were prepared from.")


def check_submission_ids(test_ids: DataFrame, submission_ids: DataFrame) -> None:
    """Submission Ids must equal the test Ids as a set, with no duplicates (one join, one aggregate)."""
    joined = (test_ids.groupBy("Id").agg(F.count(F.lit(1)).alias("in_test"))
              .join(submission_ids.groupBy("Id").agg(F.count(F.lit(1)).alias("in_submission")), "Id", "full_outer"))
    conditions = {"missing": F.col("in_submission").isNull(), "not in the test set": F.col("in_test").isNull(),
                  "duplicated": F.col("in_submission") > 1}
    counts = joined.agg(*[F.sum(c.cast("long")).alias(label) for label, c in conditions.items()]).first()
    problems = [f"{counts[label]} Id(s) {label}, e.g. {_examples(joined.filter(condition))}"
                for label, condition in conditions.items() if counts[label]]
    if problems:
        raise SubmissionCheckError("submission does not have exactly one row per test Id: " + "; ".join(problems))


def check_accounting(test_rows: int, forecast_rows: int, closed_rows: int) -> None:
    if forecast_rows + closed_rows != test_rows:
        raise SubmissionCheckError(f"row accounting failed: {forecast_rows} forecast + {closed_rows} closed != "
                                   f"{test_rows} test rows")


def csv_bytes(submission: pd.DataFrame) -> bytes:
    """Exactly the columns Id,Sales, sorted by Id, Sales with two decimals."""
    ordered = submission[["Id", "Sales"]].sort_values("Id", kind="stable")
    return ordered.to_csv(index=False, float_format="%.2f").encode("utf-8")


def check_forecast_values(forecasts: DataFrame, forecast_col: str) -> None:
    """Forecasts for open rows must be finite and positive: anything else means a broken model or input."""
    value = F.col(forecast_col)
    bad = forecasts.filter(value.isNull() | F.isnan(value) | (value <= 0) | (value == float("inf")))
    count = bad.count()
    if count:
        rows = [r.asDict() for r in bad.select("Id", "StoreId", "Date", forecast_col).limit(EXAMPLES).collect()]
        raise SubmissionCheckError(f"{count} open row(s) have a non-finite or non-positive forecast, e.g. {rows}")
