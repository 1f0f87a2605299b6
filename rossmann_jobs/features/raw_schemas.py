"""The seven raw CSV files of the Rossmann drop: their columns (read by header name), column kinds, required columns
and keys."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from pyspark.sql import types as T

CORRUPT_COL = "_corrupt_record"

# Column kinds: how a raw text field is parsed (see validate.parse_columns). FLAG: a 0/1 column, also read from
# true/false (any case), as pandas, R and Spark write a boolean.
INT, DOUBLE, DATE, STRING, FLAG = "int", "double", "date", "string", "flag"


@dataclass(frozen=True)
class RawFile:
    """One input file: its columns (found by header name, in any order), how to parse them, and what makes a row
    acceptable."""

    name: str
    columns: tuple[tuple[str, str], ...]
    required: tuple[str, ...]                       # columns whose value must be set in every row
    keys: tuple[tuple[str, ...], ...] = ()           # each tuple must be unique among valid rows
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # inclusive bounds of numeric columns
    # Cross-column rules, checked after the per-column ones: (SQL condition over the parsed columns that marks a
    # bad row, reason, column named in the quarantine).
    rules: tuple[tuple[str, str, str], ...] = ()
    # Columns no feature reads: one may be absent from the header (read as missing), and a value that does not parse
    # or lies out of range is read as missing and counted in the report, never a reason to quarantine or refuse.
    unused: tuple[str, ...] = ()

    @property
    def column_names(self) -> list[str]:
        return [name for name, _kind in self.columns]

    @property
    def header_columns(self) -> list[str]:
        """The columns the header must name: every column a feature reads (in any order)."""
        return [name for name in self.column_names if name not in self.unused]

    def kind(self, column: str) -> str:
        return dict(self.columns)[column]

    def text_schema(self, header: Sequence[str] | None = None) -> T.StructType:
        """Every field of a line as text, in the order of header (default: column_names), plus Spark's corrupt-record
        column: parsing and checking happen in validate (validate.read_text_csv names the fields)."""
        return T.StructType([T.StructField(name, T.StringType()) for name in header or self.column_names]
                            + [T.StructField(CORRUPT_COL, T.StringType())])


_NO_NEGATIVE = (0, 2**31 - 1)
_FLAG = (0, 1)   # the 0/1 columns: any other value would become a new category or a wrong continuous input

TRAIN = RawFile(
    "train.csv",
    (("Store", INT), ("DayOfWeek", INT), ("Date", DATE), ("Sales", INT), ("Customers", INT), ("Open", FLAG),
     ("Promo", FLAG), ("StateHoliday", STRING), ("SchoolHoliday", FLAG)),
    required=("Store", "DayOfWeek", "Date", "Sales", "Open", "Promo", "StateHoliday", "SchoolHoliday"),
    keys=(("Store", "Date"),),
    ranges={"DayOfWeek": (1, 7), "Sales": _NO_NEGATIVE, "Customers": _NO_NEGATIVE, "Open": _FLAG, "Promo": _FLAG,
            "SchoolHoliday": _FLAG},
    # A closed day with sales is a mislabelled day (or sales booked on the wrong day): neither reading is safe to
    # learn from, and a zero-sales row would be excluded anyway.
    rules=(("`Open` = 0 AND `Sales` > 0", "sales on a closed day (Open 0, Sales > 0)", "Sales"),),
    unused=("Customers",),   # the model is not fed it (it is not known for the days forecast)
)
TEST = RawFile(
    "test.csv",
    (("Id", INT), ("Store", INT), ("DayOfWeek", INT), ("Date", DATE), ("Open", FLAG), ("Promo", FLAG),
     ("StateHoliday", STRING), ("SchoolHoliday", FLAG)),
    required=("Id", "Store", "DayOfWeek", "Date", "Promo", "StateHoliday", "SchoolHoliday"),  # Open may be blank
    keys=(("Id",), ("Store", "Date")),
    ranges={"DayOfWeek": (1, 7), "Open": _FLAG, "Promo": _FLAG, "SchoolHoliday": _FLAG},
)
STORE = RawFile(
    "store.csv",
    (("Store", INT), ("StoreType", STRING), ("Assortment", STRING), ("CompetitionDistance", DOUBLE),
     ("CompetitionOpenSinceMonth", INT), ("CompetitionOpenSinceYear", INT), ("Promo2", FLAG),
     ("Promo2SinceWeek", INT), ("Promo2SinceYear", INT), ("PromoInterval", STRING)),
    required=("Store", "StoreType", "Assortment", "Promo2"),
    keys=(("Store",),),
    ranges={"Promo2": _FLAG, "CompetitionOpenSinceMonth": (1, 12), "Promo2SinceWeek": (1, 53),
            "CompetitionOpenSinceYear": (1900, 9999), "Promo2SinceYear": (1900, 9999)},
)
STORE_STATES = RawFile("store_states.csv", (("Store", INT), ("State", STRING)), required=("Store", "State"),
                       keys=(("Store",),))
STATE_NAMES = RawFile("state_names.csv", (("StateName", STRING), ("State", STRING)),
                      required=("StateName", "State"), keys=(("StateName",),))
GOOGLE_TREND = RawFile("googletrend.csv", (("file", STRING), ("week", STRING), ("trend", INT)),
                       required=("file", "week", "trend"), keys=(("file", "week"),))

WEATHER_FEATURE_COLS = ("Max_TemperatureC", "Mean_TemperatureC", "Min_TemperatureC", "Max_Humidity",
                        "Mean_Humidity", "Min_Humidity", "Max_Wind_SpeedKm_h", "Mean_Wind_SpeedKm_h", "CloudCover")
_WEATHER_HEADER = (
    "file", "Date", "Max_TemperatureC", "Mean_TemperatureC", "Min_TemperatureC", "Dew_PointC", "MeanDew_PointC",
    "Min_DewpointC", "Max_Humidity", "Mean_Humidity", "Min_Humidity", "Max_Sea_Level_PressurehPa",
    "Mean_Sea_Level_PressurehPa", "Min_Sea_Level_PressurehPa", "Max_VisibilityKm", "Mean_VisibilityKm",
    "Min_VisibilitykM", "Max_Wind_SpeedKm_h", "Mean_Wind_SpeedKm_h", "Max_Gust_SpeedKm_h", "Precipitationmm",
    "CloudCover", "Events", "WindDirDegrees",
)
# Only the columns the features use are parsed and checked; the other weather columns stay unchecked text, and may
# be absent.
WEATHER = RawFile(
    "weather.csv",
    tuple((name, DATE if name == "Date" else DOUBLE if name in WEATHER_FEATURE_COLS else STRING)
          for name in _WEATHER_HEADER),
    required=("file", "Date"),
    keys=(("file", "Date"),),
    unused=tuple(name for name in _WEATHER_HEADER if name not in ("file", "Date", "Events", *WEATHER_FEATURE_COLS)),
)

RAW_FILES = {f.name: f for f in (TRAIN, TEST, STORE, STORE_STATES, STATE_NAMES, GOOGLE_TREND, WEATHER)}
