"""The Kaggle submission (Id,Sales): checks that it has exactly one row per test Id, and its CSV rendering."""
from __future__ import annotations

from typing import Iterable

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.forecast.prepared_checks import ForecastInputError

EXAMPLES = 5


class SubmissionCheckError(RuntimeError):
    """The forecast does not account for every test row exactly once; the message lists counts and examples."""


# The Id checks run on the driver over the Id columns alone (one row per horizon day and store: ~50k at full scale):
# as Spark joins they cost several jobs each (AQE runs every shuffle as a job of its own) for a few thousand Ids.

def _examples(ids: Iterable) -> list:
    return sorted(ids)[:EXAMPLES]


def check_unique_test_ids(test_ids: pd.Series, source: str) -> None:
    """The input's Ids must be unique, or no submission can have one row per Id."""
    copies = test_ids.value_counts()
    duplicated = copies[copies > 1].index
    if len(duplicated):
        raise ForecastInputError(f"{source}: column Id has {len(duplicated)} duplicated value(s), e.g. Ids "
                                 f"{_examples(int(i) for i in duplicated)}. Each test row needs its own Id.")


def check_raw_test_ids(raw_ids: pd.DataFrame, test_ids: pd.Series, raw_source: str, test_source: str,
                       rejected_uri: str) -> None:
    """Every Id of the raw test.csv (RawId text, Id int or missing) must be in the prepared test split, and nothing
    else: the submission must answer the whole file, so a row prepare quarantined fails the forecast instead of
    vanishing."""
    prepared = set(test_ids.astype("int64"))
    parsed = raw_ids["Id"].notna()
    known = parsed & raw_ids["Id"].where(parsed, -1).astype("int64").isin(prepared)
    missing = raw_ids.loc[~known, ["Id", "RawId"]].drop_duplicates()
    if len(missing):
        examples = (missing.assign(_unparsed=missing["Id"].notna())   # unparseable Ids first, as Spark's nulls first
                    .sort_values(["_unparsed", "Id", "RawId"])["RawId"].head(EXAMPLES).tolist())
        raise ForecastInputError(
            f"{raw_source}: {len(missing)} Id(s) are not in the prepared test split {test_source}, e.g. Ids "
            f"{examples}; the submission needs every one. Prepare quarantined them (or they are dated on or before "
            f"the as-of date): see the records in {rejected_uri}/, fix the drop and re-run prepare.")
    extra = prepared - set(raw_ids.loc[parsed, "Id"].astype("int64"))
    if extra:
        raise ForecastInputError(
            f"{test_source}: {len(extra)} Id(s) are not in {raw_source}, e.g. Ids {_examples(extra)}: --raw is "
            "not the drop these features were prepared from.")


def check_submission_ids(test_ids: pd.Series, submission_ids: pd.Series) -> None:
    """Submission Ids must equal the test Ids as a set, with no duplicates."""
    expected, copies = set(test_ids.dropna().astype("int64")), submission_ids.astype("int64").value_counts()
    found = set(copies.index)
    problems = {"missing": expected - found, "not in the test set": found - expected,
                "duplicated": set(copies[copies > 1].index)}
    messages = [f"{len(ids)} Id(s) {label}, e.g. {_examples(ids)}" for label, ids in problems.items() if ids]
    if messages:
        raise SubmissionCheckError("submission does not have exactly one row per test Id: " + "; ".join(messages))


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
