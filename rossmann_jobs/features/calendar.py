"""Date-derived features: Year/Month/Week/Day, and the capped CompetitionMonthsOpen and Promo2Weeks."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# A missing "since" year is filled with this sentinel (as in Horovod's example): it marks "no competition/promo2".
SINCE_YEAR_FILL = 1900
COMPETITION_DAYS_CAP = 2 * 360   # CompetitionMonthsOpen is capped at 24
PROMO2_DAYS_CAP = 25 * 7         # Promo2Weeks is capped at 25


def expand_date(df: DataFrame, date_col: str = "Date") -> DataFrame:
    """Add Year, Month, Week (ISO week of year) and Day of a date column."""
    date = F.col(date_col)
    return (df.withColumn("Year", F.year(date)).withColumn("Month", F.month(date))
            .withColumn("Week", F.weekofyear(date)).withColumn("Day", F.dayofmonth(date)))


def add_competition_and_promo2(df: DataFrame) -> DataFrame:
    """Fill the since-columns (year 1900, month/week 1) and add CompetitionMonthsOpen and Promo2Weeks.

    CompetitionMonthsOpen = days since the 15th of the opening month, clipped to [0, 720], // 30;
    Promo2Weeks = days since week Promo2SinceWeek of Promo2SinceYear began, clipped to [0, 175], // 7;
    both are 0 when the (filled) since-year is 1900.
    """
    df = (df.withColumn("CompetitionOpenSinceYear", F.coalesce("CompetitionOpenSinceYear", F.lit(SINCE_YEAR_FILL)))
          .withColumn("CompetitionOpenSinceMonth", F.coalesce("CompetitionOpenSinceMonth", F.lit(1)))
          .withColumn("Promo2SinceYear", F.coalesce("Promo2SinceYear", F.lit(SINCE_YEAR_FILL)))
          .withColumn("Promo2SinceWeek", F.coalesce("Promo2SinceWeek", F.lit(1))))
    competition_since = F.make_date("CompetitionOpenSinceYear", "CompetitionOpenSinceMonth", F.lit(15))
    promo2_since = F.date_add(F.make_date("Promo2SinceYear", F.lit(1), F.lit(1)), (F.col("Promo2SinceWeek") - 1) * 7)
    competition_days = _clipped_days(F.col("CompetitionOpenSinceYear"), competition_since, COMPETITION_DAYS_CAP)
    promo2_days = _clipped_days(F.col("Promo2SinceYear"), promo2_since, PROMO2_DAYS_CAP)
    return (df.withColumn("CompetitionMonthsOpen", F.floor(competition_days / 30).cast("int"))
            .withColumn("Promo2Weeks", F.floor(promo2_days / 7).cast("int")))


def _clipped_days(since_year, since_date, cap: int):
    days = F.greatest(F.lit(0), F.least(F.lit(cap), F.datediff(F.col("Date"), since_date)))
    return F.when(since_year > SINCE_YEAR_FILL, days).otherwise(0)
