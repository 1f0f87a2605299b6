"""The model's feature spec, shared by prepare (writes it), train (consumes it) and predict (applies it).

Column names and order follow Horovod's keras_spark_rossmann examples. In the prepared Parquet:
- every categorical column holds an int32 index into its vocabulary; index 0 means "unknown or missing"
  (values unseen at the as-of date, or null), 1..n are the sorted known values, so vocab_size = n + 1;
- every continuous column is float32 with nulls filled by 0.0;
- LABEL_COL holds log(Sales) as float32 (train and validation only);
- the raw keys KEY_COLS are kept beside the features for reporting (Store id, Date; Id and Open on test rows).
"""

REFERENCE_CATEGORICAL_COLS = [
    "Store", "State", "DayOfWeek", "Year", "Month", "Day", "Week", "CompetitionMonthsOpen", "Promo2Weeks",
    "StoreType", "Assortment", "PromoInterval", "CompetitionOpenSinceYear", "Promo2SinceYear", "Events",
    "Promo", "StateHoliday", "SchoolHoliday",
]

# Days to the next and since the last promo, state holiday and school holiday, capped at a week (event_days.py), as
# categories: the reference's Before/After counts are continuous and unbounded (-195 .. 0), so their batch-normalized
# values barely tell the day before a holiday from the week before, and the rush there went unlearnt (RESULTS.md).
NEAR_EVENT_COLS = ["DaysToPromo", "DaysSincePromo", "DaysToStateHoliday", "DaysSinceStateHoliday",
                   "DaysToSchoolHoliday", "DaysSinceSchoolHoliday"]
CATEGORICAL_COLS = REFERENCE_CATEGORICAL_COLS + NEAR_EVENT_COLS

REFERENCE_CONTINUOUS_COLS = [
    "CompetitionDistance", "Max_TemperatureC", "Mean_TemperatureC", "Min_TemperatureC", "Max_Humidity",
    "Mean_Humidity", "Min_Humidity", "Max_Wind_SpeedKm_h", "Mean_Wind_SpeedKm_h", "CloudCover", "trend",
    "trend_de", "BeforePromo", "AfterPromo", "AfterStateHoliday", "BeforeStateHoliday", "BeforeSchoolHoliday",
    "AfterSchoolHoliday",
]
# The reference's Before<Event> counts are not fed to the model. Where the plan (test.csv: D+1 .. D+48) holds no
# event of a kind after a horizon row, its count runs down to the plan's last day as if an event fell there: near 0
# with the near-event days at their cap, a pair no training row has, and the horizon's last weeks came out 3-4 %
# high on average. The run-up to an event is in DaysTo<Event> (capped at a week, the cap where none is known, so
# the plan's end reads as "none known"); the After counts look back, and are known.
UNFED_BEFORE_COLS = ["BeforePromo", "BeforeStateHoliday", "BeforeSchoolHoliday"]
# Each row's lead day and its store's recent sales level as known at the row's forecast origin (recent_level.py):
# not in the reference, which has no notion of an origin.
ORIGIN_COLS = ["LeadDays", "StoreLevel14d", "StoreLevel48d", "StoreLevel144d", "StoreLevel384d", "DayPromoLevel384d"]
CONTINUOUS_COLS = [col for col in REFERENCE_CONTINUOUS_COLS if col not in UNFED_BEFORE_COLS] + ORIGIN_COLS

FEATURE_COLS = CATEGORICAL_COLS + CONTINUOUS_COLS
LABEL_COL = "Sales"            # log(Sales) in prepared train/validation data
UNKNOWN_INDEX = 0
STORE_ID_COL = "StoreId"       # raw Store number (the "Store" feature is its vocabulary index)
KEY_COLS = [STORE_ID_COL, "Date"]
