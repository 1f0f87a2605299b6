"""Each store's recent sales level as known at a row's forecast origin, and the row's lead day (pure DataFrame steps).

The days up to D are cut into blocks of ORIGIN_BLOCK_DAYS ending at D; a row of block j is seen from the origin that
closes block j+1 (horizon rows: origin D), so training, validation and horizon rows alike have a lead of 1 .. 48 days
(LeadDays) and levels made only of sales up to their origin: StoreLevel14d/48d/144d/384d (the store's mean
log(Sales) over those days) and DayPromoLevel384d (the same for the row's weekday and promo flag: the naive
baseline's cell). The levels leave out 1 December to 6 January, so that a level means the same at every origin
(docs/decisions.md, "the recent levels leave out the Christmas season"); a window without sales falls back to the
next longer one, then to the store's mean up to D. Windows are unions of whole blocks, so one small aggregation per
(store, block, weekday, promo) serves every origin.
"""
from __future__ import annotations

from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from rossmann_jobs.features.spec import ORIGIN_COLS

ORIGIN_BLOCK_DAYS = 48              # the daily contract's horizon: D+1 .. D+48
TAIL_DAYS = 14
LEVEL_BLOCKS = (1, 3, 8)            # 48, 144 and 384 days
LEAD_COL, TAIL_LEVEL_COL, *LEVEL_COLS, DAY_PROMO_LEVEL_COL = ORIGIN_COLS   # named in the feature spec, in order
assert TAIL_LEVEL_COL == f"StoreLevel{TAIL_DAYS}d", TAIL_LEVEL_COL
assert LEVEL_COLS == [f"StoreLevel{ORIGIN_BLOCK_DAYS * blocks}d" for blocks in LEVEL_BLOCKS], LEVEL_COLS
DAY_PROMO_BLOCKS = LEVEL_BLOCKS[-1]
HORIZON_BLOCK = -1

CHRISTMAS_SEASON_LAST_JANUARY_DAY = 6   # 1 December .. 6 January (Epiphany)

# The levels table has about one row per 3.3 sales rows (a cell per store, 48-day block, weekday and promo flag).
# Broadcast, it keeps the rows' partitioning and order (no shuffle of the rows), but every task slot's JVM holds it
# as a hash table: at 1x Rossmann (1.0 M sales rows, 0.3 M cells) that is cheap; at 10x (10.2 M rows) the 2g driver
# ran out of heap deserializing it and retried its page allocations forever. Above this many sales rows the
# levels are joined by a shuffle instead (the same values: a join's strategy does not change them).
MAX_SALES_ROWS_TO_BROADCAST_LEVELS = 2_500_000

_BLOCK, _PROMO = "_block", "_promo"
_CELL = ["Store", _BLOCK, "DayOfWeek", _PROMO]


def days_before_as_of(as_of: date) -> Column:
    return F.datediff(F.lit(as_of), F.col("Date"))


def origin_block(as_of: date) -> Column:
    """The row's block: floor((D - Date) / 48) for days up to D, HORIZON_BLOCK after D."""
    days_before = days_before_as_of(as_of)
    return F.when(days_before < 0, F.lit(HORIZON_BLOCK)).otherwise(
        F.floor(days_before / ORIGIN_BLOCK_DAYS)).cast("int")


def lead_days(as_of: date) -> Column:
    """Days from the row's origin (the last day of the next older block, or D for the horizon) to the row."""
    origin = F.date_sub(F.lit(as_of), (F.col(_BLOCK) + 1) * ORIGIN_BLOCK_DAYS)
    return F.datediff(F.col("Date"), origin)


def in_christmas_season(day: Column) -> Column:
    """True for 1 December .. 6 January, whose sales the levels leave out."""
    return (F.month(day) == 12) | ((F.month(day) == 1) & (F.dayofmonth(day) <= CHRISTMAS_SEASON_LAST_JANUARY_DAY))


def broadcast_levels(sales_rows: int) -> bool:
    """Whether add_origin_features broadcasts its levels table, given the sales rows (train.csv + test.csv)."""
    return sales_rows <= MAX_SALES_ROWS_TO_BROADCAST_LEVELS


def add_origin_features(rows: DataFrame, as_of: date, history: Column, broadcast: bool = True) -> DataFrame:
    """rows + ORIGIN_COLS. rows need Store, Date, DayOfWeek, Promo (0/1) and Sales; history: the rows whose sales
    count (train rows up to D that parse, are unique and sold something). Only those rows' sales are read.
    broadcast: join the levels table as a broadcast (broadcast_levels), else by a shuffle."""
    rows = rows.withColumns({_BLOCK: origin_block(as_of), _PROMO: (F.col("Promo") != 0).cast("int")})
    rows = rows.withColumn(LEAD_COL, lead_days(as_of).cast("float"))
    # A history row is in the tail of its block when it lies in the last TAIL_DAYS before that block's end: the
    # origin of the rows one block younger.
    all_log_sales = F.when(history, F.log(F.col("Sales")))
    log_sales = F.when(~in_christmas_season(F.col("Date")), all_log_sales)
    tail = (days_before_as_of(as_of) % ORIGIN_BLOCK_DAYS) < TAIL_DAYS
    # Every cell of the rows with its history sums, in one aggregation (one more read of the rows' plan, not two:
    # the distinct cells joined to the history's). A cell without history gets null sums and counts.
    cells = rows.groupBy(*_CELL).agg(F.sum(log_sales).alias("_sum"), _count_or_null(log_sales).alias("_n"),
                                     F.sum(F.when(tail, log_sales)).alias("_tail_sum"),
                                     _count_or_null(F.when(tail, log_sales)).alias("_tail_n"),
                                     F.sum(all_log_sales).alias("_all_sum"),
                                     _count_or_null(all_log_sales).alias("_all_n"))
    # One row per (store, block, weekday, promo) of the rows, ready to use: ~300 k rows and ~13 MB at full scale.
    levels = levels_at_origins(cells)
    # "merge": a sort-merge join whatever Spark estimates the table's size to be.
    return rows.join(F.broadcast(levels) if broadcast else levels.hint("merge"), _CELL, "left").drop(_BLOCK, _PROMO)


def _count_or_null(values: Column) -> Column:
    """The count of the non-null values, null for none: a window's mean over cells without history stays null."""
    count = F.count(values)
    return F.when(count > 0, count)


def levels_at_origins(cells: DataFrame) -> DataFrame:
    """Per cell (Store, block, weekday, promo; its history sums, null where nothing sold): the ORIGIN_COLS levels
    seen from the block's origin, filled and float32. Window frames over the blocks ahead of the cell's block
    (range frames on the block number): sorts, which spill, rather than more hash aggregations, which need memory
    pages of their own (tests/jobs/test_prepare_memory.py)."""
    store_blocks = Window.partitionBy("Store").orderBy(_BLOCK)
    own_cell = Window.partitionBy("Store", "DayOfWeek", _PROMO).orderBy(_BLOCK)

    def mean(window, first: int, last: int, total: str = "_sum", rows: str = "_n") -> Column:
        frame = window.rangeBetween(first, last)
        return F.sum(total).over(frame) / F.sum(rows).over(frame)

    raw = {TAIL_LEVEL_COL: mean(store_blocks, 1, 1, "_tail_sum", "_tail_n"),
           **{name: mean(store_blocks, 1, count) for count, name in zip(LEVEL_BLOCKS, LEVEL_COLS)},
           DAY_PROMO_LEVEL_COL: mean(own_cell, 1, DAY_PROMO_BLOCKS)}
    whole_store = Window.partitionBy("Store").rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    # Each window falls back to the next longer one, the longest to the store's mean up to D outside the season, then
    # with it (a store that opened in December), 0 for a store that never sold anything up to D.
    fallback = F.coalesce(F.sum("_sum").over(whole_store) / F.sum("_n").over(whole_store),
                          F.sum("_all_sum").over(whole_store) / F.sum("_all_n").over(whole_store), F.lit(0.0))
    filled = {}
    for name in reversed([TAIL_LEVEL_COL, *LEVEL_COLS]):
        fallback = F.coalesce(raw[name], fallback)
        filled[name] = fallback
    filled[DAY_PROMO_LEVEL_COL] = F.coalesce(raw[DAY_PROMO_LEVEL_COL], filled[LEVEL_COLS[-1]])
    return cells.select(*_CELL, *[filled[name].cast("float").alias(name)
                                  for name in (TAIL_LEVEL_COL, *LEVEL_COLS, DAY_PROMO_LEVEL_COL)])
