"""The open rule for test rows: Open = 0 means closed (Sales 0), Open = 1 or blank means open (forecast)."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

OPEN_STATUS_COL = "OpenStatus"
OPEN, OPEN_BLANK, CLOSED, INVALID = "open", "open_blank", "closed", "invalid"


def with_open_status(df: DataFrame) -> DataFrame:
    """Adds OpenStatus: open (Open = 1), open_blank (Open null: treated as open), closed (0), invalid (else)."""
    status = (F.when(F.col("Open").isNull(), F.lit(OPEN_BLANK))
              .when(F.col("Open") == 1, F.lit(OPEN))
              .when(F.col("Open") == 0, F.lit(CLOSED))
              .otherwise(F.lit(INVALID)))
    return df.withColumn(OPEN_STATUS_COL, status)


def is_forecast(status_col: str = OPEN_STATUS_COL):
    return F.col(status_col).isin(OPEN, OPEN_BLANK)
