"""The reference data preparation, copied nearly verbatim from Horovod's Rossmann example (via Flyte's port).

Kept for the equivalence test and the benchmark: RDD mapPartitions loops and Python UDFs are its own. Changes
from the original: the SparkSession and data folder are arguments, sampling is off, nothing is printed.
"""
from __future__ import annotations

import datetime
from typing import Any, Dict, List

import pyspark.sql
import pyspark.sql.functions as F
import pyspark.sql.types as T
from pyspark import Row

from rossmann_jobs.features.spec import REFERENCE_CATEGORICAL_COLS as CATEGORICAL_COLS  # nor near-event days
from rossmann_jobs.features.spec import (
    REFERENCE_CONTINUOUS_COLS as CONTINUOUS_COLS,  # the reference has no origin features
)


def prepare_google_trend(google_trend_csv: pyspark.sql.DataFrame) -> pyspark.sql.DataFrame:
    google_trend_all = google_trend_csv.withColumn(
        "Date", F.regexp_extract(google_trend_csv.week, "(.*?) -", 1)
    ).withColumn("State", F.regexp_extract(google_trend_csv.file, "Rossmann_DE_(.*)", 1))
    google_trend_all = google_trend_all.withColumn(
        "State",
        F.when(google_trend_all.State == "NI", "HB,NI").otherwise(google_trend_all.State),
    )
    return expand_date(google_trend_all)


def expand_date(df: pyspark.sql.DataFrame) -> pyspark.sql.DataFrame:
    df = df.withColumn("Date", df.Date.cast(T.DateType()))
    return (
        df.withColumn("Year", F.year(df.Date))
        .withColumn("Month", F.month(df.Date))
        .withColumn("Week", F.weekofyear(df.Date))
        .withColumn("Day", F.dayofmonth(df.Date))
    )


def add_event_days(df: pyspark.sql.DataFrame, cols: List[str]) -> pyspark.sql.DataFrame:
    def add_elapsed_column(col, asc):
        def fn(rows):
            last_store, last_date = None, None
            for r in rows:
                if last_store != r.Store:
                    last_store = r.Store
                    last_date = r.Date
                if r[col]:
                    last_date = r.Date
                fields = r.asDict().copy()
                fields[("After" if asc else "Before") + col] = (r.Date - last_date).days
                yield Row(**fields)

        return fn

    df = df.repartition(df.Store)
    for asc in [False, True]:
        sort_col = df.Date.asc() if asc else df.Date.desc()
        rdd = df.sortWithinPartitions(df.Store.asc(), sort_col).rdd
        for col in cols:
            rdd = rdd.mapPartitions(add_elapsed_column(col, asc))
        df = rdd.toDF()
    return df


def prepare_df(df, store_csv, store_states_csv, state_names_csv, google_trend_csv, weather_csv):
    num_rows = df.count()
    df = expand_date(df)
    df = (
        df.withColumn("Open", df.Open != "0")
        .withColumn("Promo", df.Promo != "0")
        .withColumn("StateHoliday", df.StateHoliday != "0")
        .withColumn("SchoolHoliday", df.SchoolHoliday != "0")
    )
    store = store_csv.join(store_states_csv, "Store")
    df = df.join(store, "Store")
    google_trend_all = prepare_google_trend(google_trend_csv)
    df = df.join(google_trend_all, ["State", "Year", "Week"]).select(df["*"], google_trend_all.trend)
    google_trend_de = google_trend_all[google_trend_all.file == "Rossmann_DE"].withColumnRenamed("trend", "trend_de")
    df = df.join(google_trend_de, ["Year", "Week"]).select(df["*"], google_trend_de.trend_de)
    weather = weather_csv.join(state_names_csv, weather_csv.file == state_names_csv.StateName)
    df = df.join(weather, ["State", "Date"])
    df = (
        df.withColumn("CompetitionOpenSinceYear", F.coalesce(df.CompetitionOpenSinceYear, F.lit(1900)))
        .withColumn("CompetitionOpenSinceMonth", F.coalesce(df.CompetitionOpenSinceMonth, F.lit(1)))
        .withColumn("Promo2SinceYear", F.coalesce(df.Promo2SinceYear, F.lit(1900)))
        .withColumn("Promo2SinceWeek", F.coalesce(df.Promo2SinceWeek, F.lit(1)))
    )
    df = df.withColumn(
        "CompetitionOpenSince",
        F.to_date(F.format_string("%s-%s-15", df.CompetitionOpenSinceYear, df.CompetitionOpenSinceMonth)),
    )
    df = df.withColumn(
        "CompetitionDaysOpen",
        F.when(
            df.CompetitionOpenSinceYear > 1900,
            F.greatest(F.lit(0), F.least(F.lit(360 * 2), F.datediff(df.Date, df.CompetitionOpenSince))),
        ).otherwise(0),
    )
    df = df.withColumn("CompetitionMonthsOpen", (df.CompetitionDaysOpen / 30).cast(T.IntegerType()))
    df = df.withColumn(
        "Promo2Since",
        F.expr('date_add(format_string("%s-01-01", Promo2SinceYear), (cast(Promo2SinceWeek as int) - 1) * 7)'),
    )
    df = df.withColumn(
        "Promo2Days",
        F.when(
            df.Promo2SinceYear > 1900,
            F.greatest(F.lit(0), F.least(F.lit(25 * 7), F.datediff(df.Date, df.Promo2Since))),
        ).otherwise(0),
    )
    df = df.withColumn("Promo2Weeks", (df.Promo2Days / 7).cast(T.IntegerType()))
    assert num_rows == df.count(), "lost rows in joins"
    return df


def build_vocabulary(df: pyspark.sql.DataFrame) -> Dict[str, List[Any]]:
    vocab = {}
    for col in CATEGORICAL_COLS:
        values = [r[0] for r in df.select(col).distinct().collect()]
        col_type = type([x for x in values if x is not None][0])
        default_value = col_type()
        vocab[col] = sorted(values, key=lambda x: x or default_value)
    return vocab


def cast_columns(df: pyspark.sql.DataFrame, cols: List[str]) -> pyspark.sql.DataFrame:
    for col in cols:
        df = df.withColumn(col, F.coalesce(df[col].cast(T.FloatType()), F.lit(0.0)))
    return df


def lookup_columns(df: pyspark.sql.DataFrame, vocab: Dict[str, List[Any]]) -> pyspark.sql.DataFrame:
    def lookup(mapping):
        def fn(v):
            return mapping.index(v)

        return F.udf(fn, returnType=T.IntegerType())

    for col, mapping in vocab.items():
        df = df.withColumn(col, lookup(mapping)(df[col]))
    return df


def data_preparation(spark, data_dir: str, sample_rate: float | None = None):
    """Returns (max_sales, vocab, train_df, test_df) exactly as the reference's data_preparation does."""
    train_csv = spark.read.csv("%s/train.csv" % data_dir, header=True)
    test_csv = spark.read.csv("%s/test.csv" % data_dir, header=True)
    store_csv = spark.read.csv("%s/store.csv" % data_dir, header=True)
    store_states_csv = spark.read.csv("%s/store_states.csv" % data_dir, header=True)
    state_names_csv = spark.read.csv("%s/state_names.csv" % data_dir, header=True)
    google_trend_csv = spark.read.csv("%s/googletrend.csv" % data_dir, header=True)
    weather_csv = spark.read.csv("%s/weather.csv" % data_dir, header=True)

    if sample_rate:
        train_csv = train_csv.sample(withReplacement=False, fraction=sample_rate)
        test_csv = test_csv.sample(withReplacement=False, fraction=sample_rate)

    train_df = prepare_df(train_csv, store_csv, store_states_csv, state_names_csv, google_trend_csv,
                          weather_csv).cache()
    test_df = prepare_df(test_csv, store_csv, store_states_csv, state_names_csv, google_trend_csv,
                         weather_csv).cache()

    elapsed_cols = ["Promo", "StateHoliday", "SchoolHoliday"]
    elapsed = add_event_days(
        train_df.select("Date", "Store", *elapsed_cols).unionAll(test_df.select("Date", "Store", *elapsed_cols)),
        elapsed_cols,
    )
    train_df = train_df.join(elapsed, ["Date", "Store"]).select(
        train_df["*"], *[prefix + col for prefix in ["Before", "After"] for col in elapsed_cols])
    test_df = test_df.join(elapsed, ["Date", "Store"]).select(
        test_df["*"], *[prefix + col for prefix in ["Before", "After"] for col in elapsed_cols])

    train_df = train_df.filter(train_df.Sales > 0)
    all_cols = CATEGORICAL_COLS + CONTINUOUS_COLS
    train_df = train_df.select(*(all_cols + ["Sales", "Date"])).cache()
    test_df = test_df.select(*(all_cols + ["Id", "Date"])).cache()

    vocab = build_vocabulary(
        train_df.select(*CATEGORICAL_COLS).unionAll(test_df.select(*CATEGORICAL_COLS)).cache(),
    )
    train_df = cast_columns(train_df, CONTINUOUS_COLS + ["Sales"])
    train_df = lookup_columns(train_df, vocab)
    test_df = cast_columns(test_df, CONTINUOUS_COLS)
    test_df = lookup_columns(test_df, vocab)

    test_min_date = test_df.agg(F.min(test_df.Date)).collect()[0][0]
    test_max_date = test_df.agg(F.max(test_df.Date)).collect()[0][0]
    one_year = datetime.timedelta(365)
    train_df = train_df.withColumn(
        "Validation",
        (train_df.Date > test_min_date - one_year) & (train_df.Date <= test_max_date - one_year),
    )
    max_sales = train_df.agg(F.max(train_df.Sales)).collect()[0][0]
    train_df = train_df.withColumn("Sales", F.log(train_df.Sales))
    return max_sales, vocab, train_df, test_df
