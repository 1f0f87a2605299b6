"""Date-derived features: Year/Month/Week/Day, and the capped CompetitionMonthsOpen and Promo2Weeks."""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
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


def trend_key_year(day: Column, iso_keys: bool) -> Column:
    """The Year of a day's trend key (with its ISO Week): the calendar year as in Horovod's example, or with
    iso_keys the ISO week-numbering year, which with the ISO week names each Monday..Sunday week once."""
    return F.date_part(F.lit("YEAROFWEEK"), day) if iso_keys else F.year(day)


COMPETITION_SINCE, PROMO2_SINCE = "_competition_since", "_promo2_since"   # store-level dates, null for "none"


def add_since_dates(store: DataFrame) -> DataFrame:
    """Fill the store's since-columns (year 1900, month/week 1) and add the dates they stand for: COMPETITION_SINCE
    (the 15th of the opening month) and PROMO2_SINCE (the start of week Promo2SinceWeek of Promo2SinceYear), each
    null when its (filled) year is 1900. Done on the store table, so each sales row only counts days."""
    df = (store.withColumn("CompetitionOpenSinceYear", F.coalesce("CompetitionOpenSinceYear", F.lit(SINCE_YEAR_FILL)))
          .withColumn("CompetitionOpenSinceMonth", F.coalesce("CompetitionOpenSinceMonth", F.lit(1)))
          .withColumn("Promo2SinceYear", F.coalesce("Promo2SinceYear", F.lit(SINCE_YEAR_FILL)))
          .withColumn("Promo2SinceWeek", F.coalesce("Promo2SinceWeek", F.lit(1))))
    competition_since = F.make_date("CompetitionOpenSinceYear", "CompetitionOpenSinceMonth", F.lit(15))
    promo2_since = F.date_add(F.make_date("Promo2SinceYear", F.lit(1), F.lit(1)), (F.col("Promo2SinceWeek") - 1) * 7)
    return df.withColumns({
        COMPETITION_SINCE: F.when(F.col("CompetitionOpenSinceYear") > SINCE_YEAR_FILL, competition_since),
        PROMO2_SINCE: F.when(F.col("Promo2SinceYear") > SINCE_YEAR_FILL, promo2_since)})


def add_competition_and_promo2(df: DataFrame) -> DataFrame:
    """CompetitionMonthsOpen and Promo2Weeks of each row (needs Date and the since dates of add_since_dates).

    CompetitionMonthsOpen = days since COMPETITION_SINCE, clipped to [0, 720], // 30;
    Promo2Weeks = days since PROMO2_SINCE, clipped to [0, 175], // 7; both are 0 when the since date is null.
    """
    competition_days = _clipped_days(F.col(COMPETITION_SINCE), COMPETITION_DAYS_CAP)
    promo2_days = _clipped_days(F.col(PROMO2_SINCE), PROMO2_DAYS_CAP)
    return df.withColumns({"CompetitionMonthsOpen": F.floor(competition_days / 30).cast("int"),
                           "Promo2Weeks": F.floor(promo2_days / 7).cast("int")})


def _clipped_days(since_date: Column, cap: int) -> Column:
    # Spark's least/greatest skip nulls, so the null since date needs its own branch.
    days = F.greatest(F.lit(0), F.least(F.lit(cap), F.datediff(F.col("Date"), since_date)))
    return F.when(since_date.isNotNull(), days).otherwise(0)
