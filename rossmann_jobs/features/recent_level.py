"""Each store's recent sales level as known at a row's forecast origin, and the row's lead day (pure DataFrame steps).

A forecast made on D sees the horizon D+1 .. D+48 from one origin, D. Training rows are given the same view: the
days up to D are cut into blocks of ORIGIN_BLOCK_DAYS ending at D (block 0 = (D-48, D], block 1 = (D-96, D-48],
...), and a row of block j is seen from the origin that closes block j+1 (D - 48 (j+1)); horizon rows are block -1,
origin D. So every row, in training, validation and the horizon alike, has a lead of 1 .. 48 days and features
made only of sales dated on or before its origin (never after D; after the row's own origin only in the fallback
below, for rows whose origin has no history at all):
- LeadDays: days from the origin to the row;
- StoreLevel14d/48d/144d/384d: the store's mean log(Sales) over the 14, 48, 144 and 384 days up to the origin (the
  last two weeks, ~7 weeks, ~5 months, a year and its season): a level shift or a trend shows in the short ones;
- DayPromoLevel384d: the same over 384 days for the row's own weekday and promo flag (the naive seasonal
  baseline's cell, as a feature the model can correct).
A window without sales falls back to the next longer one, and the longest to the store's mean over all its sales
up to D (only the first block of a store's history, and a store reopening after a long closure, need it).
Windows are unions of whole blocks (the 14 days: the tail of the block that ends at the origin), so two small
aggregations of the history serve every origin.
"""
from __future__ import annotations

from datetime import date

from pyspark.sql import Column, DataFrame
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

_BLOCK, _PROMO, _TAIL = "_block", "_promo", "_tail"
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


def add_origin_features(rows: DataFrame, as_of: date, history: Column) -> DataFrame:
    """rows + ORIGIN_COLS. rows need Store, Date, DayOfWeek, Promo (0/1) and Sales; history: the rows whose sales
    count (train rows up to D that parse, are unique and sold something). Only those rows' sales are read."""
    rows = rows.withColumns({_BLOCK: origin_block(as_of), _PROMO: (F.col("Promo") != 0).cast("int")})
    rows = rows.withColumn(LEAD_COL, lead_days(as_of))
    # A history row is in the tail of its block when it lies in the last TAIL_DAYS before that block's end: the
    # origin of the rows one block younger.
    sold = (rows.filter(history)
            .select(*_CELL, F.log(F.col("Sales")).alias("_y"),
                    ((days_before_as_of(as_of) % ORIGIN_BLOCK_DAYS) < TAIL_DAYS).alias(_TAIL)))
    cells = sold.groupBy(*_CELL).agg(F.sum("_y").alias("_sum"), F.count(F.lit(1)).alias("_n"))
    blocks = sold.groupBy("Store", _BLOCK).agg(
        F.sum("_y").alias("_sum"), F.count(F.lit(1)).alias("_n"),
        F.sum(F.when(F.col(_TAIL), F.col("_y"))).alias("_tail_sum"), F.count(F.when(F.col(_TAIL), 1)).alias("_tail_n"))
    levels = _levels_at_origins(rows.select(*_CELL).distinct(), cells, blocks)
    store_mean = blocks.groupBy("Store").agg((F.sum("_sum") / F.sum("_n")).alias("_store_mean"))
    # One row per (store, block, weekday, promo), ~300 k at full scale: Spark chooses how to join it.
    joined = rows.join(levels, _CELL, "left").join(F.broadcast(store_mean), "Store", "left")
    fallback = F.col("_store_mean")
    filled = {}
    for name in reversed([TAIL_LEVEL_COL, *LEVEL_COLS]):   # the longest window first: each shorter one falls back
        fallback = F.coalesce(F.col(f"_{name}"), fallback)
        filled[name] = fallback
    filled[DAY_PROMO_LEVEL_COL] = F.coalesce(F.col(f"_{DAY_PROMO_LEVEL_COL}"), filled[LEVEL_COLS[-1]])
    helpers = [f"_{name}" for name in (TAIL_LEVEL_COL, *LEVEL_COLS, DAY_PROMO_LEVEL_COL)]
    return joined.withColumns(filled).drop(_BLOCK, _PROMO, "_store_mean", *helpers)


def _levels_at_origins(targets: DataFrame, cells: DataFrame, blocks: DataFrame) -> DataFrame:
    """Per target cell (Store, block, weekday, promo): the mean log sales of its store over the windows up to its
    origin (the tail of block+1, blocks block+1 .. block+k for each k of LEVEL_BLOCKS) and of its own weekday and
    promo over DAY_PROMO_BLOCKS blocks; null where none sold."""
    ahead = F.col("h._block") - F.col("t._block")
    origins = targets.select("Store", _BLOCK).distinct()
    tail = ahead == 1
    store_levels = (origins.alias("t")
                    .join(blocks.alias("h"), (F.col("t.Store") == F.col("h.Store"))
                          & ahead.between(1, max(LEVEL_BLOCKS)))
                    .groupBy(F.col("t.Store").alias("Store"), F.col("t._block").alias(_BLOCK))
                    .agg((F.sum(F.when(tail, F.col("h._tail_sum"))) / F.sum(F.when(tail, F.col("h._tail_n"))))
                         .alias(f"_{TAIL_LEVEL_COL}"),
                         *[_mean_within(ahead, count).alias(f"_{name}")
                           for count, name in zip(LEVEL_BLOCKS, LEVEL_COLS)]))
    same_cell = [F.col(f"t.{col}") == F.col(f"h.{col}") for col in ("Store", "DayOfWeek", _PROMO)]
    cell_levels = (targets.alias("t").join(cells.alias("h"), [*same_cell, ahead.between(1, DAY_PROMO_BLOCKS)])
                   .groupBy(*[F.col(f"t.{col}").alias(col) for col in _CELL])
                   .agg(_mean_within(ahead, DAY_PROMO_BLOCKS).alias(f"_{DAY_PROMO_LEVEL_COL}")))
    return targets.join(store_levels, ["Store", _BLOCK], "left").join(cell_levels, _CELL, "left")


def _mean_within(ahead: Column, blocks: int) -> Column:
    """Mean log sales over the joined history blocks 1 .. blocks ahead of the target (null if none sold)."""
    inside = ahead <= blocks
    return F.sum(F.when(inside, F.col("h._sum"))) / F.sum(F.when(inside, F.col("h._n")))
