"""Why the horizon's forecast sits lower than the validation window's: error by lead, and variants retrained.

Reads cells that bench/bench_robustness.py ran (`<workdir>/<scenario>-<stores>/<label>/`: the prepared features and
`runs/run`'s model and predictions, the drop under `drops/<as-of>`, the truth beside it) and scores the model's log
error against the truth's expected sales by lead (validation rows seen from D - 48, horizon rows from D), then, with
`--variants`, retrains each cell on changed features with the product's jobs and scores the horizon again:
- `as-prepared`: the features unchanged, retrained (with `'--train-args=--seed 43' --run-suffix=-seed43`, the
  baseline of the other variants on another training seed; the values start with "-", hence the "=");
- `refit`: the train split plus the validation rows (every row up to D), the same training defaults: whether the
  horizon's lower level is the model's staleness (its train rows end 48 days before D);
- `holiday-clean`: the origin level features (features/recent_level.py) recomputed without the days within 2 days
  of a state holiday (the rush before, the rebound after); `holiday-clean-balanced`: the same with each window's
  level the mean of its weekdays' means, so the days left out do not tilt its weekday mix;
- `without-<group>`: one group of columns (WITHOUT_GROUPS: the near-event days of one event, the seed's day counts
  or its Before counts alone, the Year, the calendar's Month/Week/Day) held at one value in every split, so the
  model cannot use them (an ablation); since session 39 the product does not write the Before counts
  (spec.UNFED_SEED_COLS), so `without-before-counts`, `events-within-reach` and bench_lead_bias's Before probes
  apply to cells of earlier products only;
- `trend-since-level`: each row's trend and trend_de as a ratio to their mean over the 144 days up to the row's
  origin (the window of its 144-day level), so the model sees how far the trend moved since its levels were
  measured, not the trend's absolute value (predict's interval calibration then reads those ratios as trends: its
  coverage is not a measure of the variant);
- `level-deltas`: the origin levels as the 384-day level and each shorter window's difference from the next longer
  one (the weekday-promo level's from the 384-day level);
- `year-ago-origin`: the train split plus a second view of last year's horizon, the train rows dated D-364 ..
  D-317 seen from the origin D-365 (LeadDays and the origin levels recomputed as features/recent_level.py does): the
  blocks of 48 days end at D, so no training row is seen from the horizon's origin a year earlier (the nearest,
  D-384, lies 19 days earlier in the season, which matters after Christmas);
- `christmas-clean`: the origin levels recomputed without the days from 1 December to 6 January, so a window's
  level does not depend on whether it holds the Christmas rush (the calendar's learnt effects are relative to the
  levels, and the training origins meet Christmas at another phase than a January horizon's origin does);
- `store-phased-origins`: the christmas-clean levels, and the train split's rows seen from their store's own grid
  of origins, ending store_phase (store id mod 48) days before D - 48, with their LeadDays (validation and horizon
  rows as before): the blocks of 48 days end at D for every store, so a calendar day is seen from one distance in
  each year, and the lead's learnt effect carries that day's season (the horizon's late weeks sit 3-4 % high);
- `deseasonalized-levels`: the christmas-clean levels of every split made of each day's log sales less a seasonal
  index of its day of the year (seasonal_index: the chain's deviation from the surrounding year in the years up to
  D), so a level means the same at every phase of the year and no origin phase is special;
- `events-within-reach`: every row sees the next promo or holiday only up to its origin + 48 days, as a horizon row
  does (its Before<Event> counts down to that day, its DaysTo<Event> is the cap beyond it).
Variants joined by "+" are applied in turn to one copy (e.g. `christmas-clean+without-before-counts` on a cell
prepared before the Christmas-clean levels). With `--probes`, also asks each cell's stored model (the numpy
forward pass, no retraining) how its horizon forecast moves when the horizon rows' inputs change: the Google trend
x 1.1, the trend of the validation window's last row per state (persistence), the seed's Before<Event> set to -60
where it counts down to the plan's end, and each origin level + 0.05 (per unit: how much of a level change reaches
the forecast); and how it forecasts last year's horizon rows from their own training origins and from D - 365 (the
horizon's view a year earlier). `--origin-swap` asks one horizon cell's model about its horizon rows that a later
drop validates on, with groups of inputs taken from that later view.
Writes bench/out/horizon_level_<name>.json and prints the tables. Offline: no product code is changed.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/bench_horizon_level.py \\
        --workdir /work/bench-s25 --cells baseline-150:post:2015-07-31,mixed-150:post0531:2015-05-31 \\
        [--variants refit,holiday-clean] [--name s27]
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_forecast_truth as bft  # noqa: E402  (the bench's train-and-predict through spark-submit)

from rossmann_jobs import metrics, storage  # noqa: E402
from rossmann_jobs.features.elapsed import NEAR_EVENT_DAYS  # noqa: E402
from rossmann_jobs.features.recent_level import (  # noqa: E402
    CHRISTMAS_SEASON_LAST_JANUARY_DAY,
    LEVEL_BLOCKS,
    ORIGIN_BLOCK_DAYS,
    TAIL_DAYS,
)
from rossmann_jobs.features.spec import ORIGIN_COLS  # noqa: E402
from rossmann_jobs.forecast.quantiles import DAYS_PER_WEEK, LEAD_WEEKS  # noqa: E402

LEVEL_NAMES = list(ORIGIN_COLS[1:])     # StoreLevel14d .. DayPromoLevel384d (LeadDays is unchanged)
HOLIDAY_DAYS = 2
QUANTILE_LEVELS = {"P10": 0.1, "P50": 0.5, "P90": 0.9}
EVENTS = ("Promo", "StateHoliday", "SchoolHoliday")
WITHOUT_GROUPS = {"promo-days": [f"{side}Promo" for side in ("DaysTo", "DaysSince")],
                  "state-holiday-days": [f"{side}StateHoliday" for side in ("DaysTo", "DaysSince")],
                  "school-holiday-days": [f"{side}SchoolHoliday" for side in ("DaysTo", "DaysSince")],
                  "seed-day-counts": [f"{side}{event}" for side in ("Before", "After") for event in EVENTS],
                  "seed-state-holiday-counts": ["BeforeStateHoliday", "AfterStateHoliday"],
                  # the seed's Before counts alone: on a horizon row with no event ahead in the plan they count down
                  # to the plan's last day, as if an event fell there (bench_lead_bias.py)
                  "before-counts": [f"Before{event}" for event in EVENTS],
                  "year": ["Year"], "calendar": ["Month", "Week", "Day"],
                  # predict reads the lead week from LeadDays: without it every row is lead week 1, so the variant's
                  # interval figures are not a measure of it (its point forecast is)
                  "lead": ["LeadDays"]}
VARIANTS = ("as-prepared", "refit", "holiday-clean", "holiday-clean-balanced", "events-within-reach", "level-deltas",
            "year-ago-origin", "christmas-clean", "store-phased-origins", "deseasonalized-levels", "trend-since-level",
            *(f"without-{group}" for group in WITHOUT_GROUPS))


def lead_week_of(lead_days) -> np.ndarray:
    """Each lead day's lead week as predict counts it (forecast/quantiles.lead_week): 1 .. LEAD_WEEKS."""
    return np.clip(np.ceil(np.asarray(lead_days, dtype=float) / DAYS_PER_WEEK), 1, LEAD_WEEKS)


def committed_dir(out: Path) -> Path:
    """The attempt folder that out's _SUCCESS manifest names (the committed one, not any attempt on disk)."""
    return Path(storage.committed_uri(str(out)))


def truth(cell: Path) -> pd.DataFrame:
    frame = pd.read_parquet(cell.parent / "drops.truth.expected.parquet").rename(columns={"Store": "StoreId"})
    return frame.assign(Date=pd.to_datetime(frame.Date))[["StoreId", "Date", "ExpectedSales", "Sales"]]


def predictions(run: Path, name: str = "predictions") -> pd.DataFrame:
    """The committed predictions of run's output `name` (predict's --out under the run)."""
    frame = pd.read_parquet(committed_dir(run / name) / "predictions")
    return frame.assign(Date=pd.to_datetime(frame.Date))


def lead_errors(cell: Path, as_of: pd.Timestamp) -> pd.DataFrame:
    """split, lead (days from the row's origin), err (log forecast / the truth's expected sales)."""
    rows = predictions(cell / "runs" / "run").merge(truth(cell), on=["StoreId", "Date"])
    rows = rows[(rows.SalesForecast > 0) & (rows.ExpectedSales > 0)]
    origin_offset = np.where(rows.split == "test", 0, ORIGIN_BLOCK_DAYS)
    return pd.DataFrame({"split": rows.split.values, "lead": (rows.Date - as_of).dt.days.values + origin_offset,
                         "err": np.log(rows.SalesForecast / rows.ExpectedSales).values})


def scored_horizon(cell: Path, run: Path, name: str = "predictions") -> pd.DataFrame:
    """The horizon rows of run's predictions `name` that sold, with the truth's Sales and ExpectedSales."""
    rows = predictions(run, name)
    rows = rows[rows.split == "test"].merge(truth(cell), on=["StoreId", "Date"])
    return rows[rows.Sales > 0]


def quantile_loss_sum(rows: pd.DataFrame, prefix: str) -> float:
    """2 x the summed pinball loss of the quantile columns `<prefix>P10` .. over rows' Sales, averaged over the
    levels: the weighted quantile loss before its division by the sales (pooled over runs, the sums add up)."""
    return float(np.mean([2 * np.sum(metrics.pinball_loss(rows.Sales, rows[f"{prefix}{n}"], q))
                          for n, q in QUANTILE_LEVELS.items()]))


def interval_scores(rows: pd.DataFrame) -> dict:
    """P10-P90 coverage (all, by lead week) and the weighted quantile loss against the naive baseline's quantiles."""
    covered = metrics.in_interval(rows.Sales, rows.SalesP10, rows.SalesP90)
    return {"coverage": float(covered.mean()),
            "coverage_by_lead_week": [round(float(v), 4) for v in covered.groupby(rows.LeadWeek).mean()],
            "wql_vs_naive": quantile_loss_sum(rows, "Sales") / quantile_loss_sum(rows, "SalesBaseline") - 1}


def horizon_scores(cell: Path, run: Path) -> dict:
    rows = scored_horizon(cell, run)
    err = np.log(rows.SalesForecast / rows.ExpectedSales)
    metrics = json.loads((committed_dir(run / "model") / "metrics.json").read_text())
    return {"exp_rmspe": metrics.exp_rmspe(rows.Sales, rows.SalesForecast),
            "median_log_error": float(np.median(err)),
            "median_log_error_by_lead_week": [round(float(v), 4) for v in err.groupby(rows.LeadWeek).median()],
            **interval_scores(rows),
            "val_exp_rmspe": metrics["best_val_exp_rmspe"], "best_epoch": metrics["best_epoch"]}


def copy_features(cell: Path, dest: Path) -> Path:
    """A copy of the cell's committed features under dest/features; the attempt folder."""
    source = committed_dir(cell / "features")
    features = dest / "features"
    shutil.rmtree(features, ignore_errors=True)
    attempt = features / "attempts" / source.name
    shutil.copytree(source, attempt)
    shutil.copy(cell / "features" / "_SUCCESS", features / "_SUCCESS")
    return attempt


def register_train_shards(attempt: Path, shards: list[dict]) -> None:
    """Adds shards ({"file", "rows"}, already written under train/) to the metadata's and the manifest's listings
    and the train row count."""
    meta = json.loads((attempt / "metadata.json").read_text())
    manifest = json.loads((attempt.parents[1] / "_SUCCESS").read_text())
    meta["shards"]["train"] += shards
    manifest["files"] += [f"train/{shard['file']}" for shard in shards]
    meta["row_counts"]["train"] += sum(shard["rows"] for shard in shards)
    manifest["summary"]["row_counts"]["train"] = meta["row_counts"]["train"]
    (attempt / "metadata.json").write_text(json.dumps(meta))
    (attempt.parents[1] / "_SUCCESS").write_text(json.dumps(manifest))


def with_validation_in_train(attempt: Path) -> None:
    meta = json.loads((attempt / "metadata.json").read_text())
    shards = [{**shard, "file": "v-" + shard["file"]} for shard in meta["shards"]["validation"]]
    for shard in meta["shards"]["validation"]:
        shutil.copy(attempt / "validation" / shard["file"], attempt / "train" / ("v-" + shard["file"]))
    register_train_shards(attempt, shards)


def origin_levels(history: pd.DataFrame, origin: pd.Timestamp) -> tuple[pd.DataFrame, pd.Series]:
    """Per store the origin levels (LEVEL_NAMES but the last) seen from origin, each falling back to the next longer
    one and the longest to the store's mean up to D; per (store, weekday, promo) the 384-day level (recent_level.py:
    the days of the Christmas season left out, as the product has done since d5dc6ed).
    history: StoreId, Date, Sales (log), DayOfWeek, Promo of the rows that sold, dated <= D."""
    history = history[~in_christmas_season(history.Date)]
    known = history[history.Date <= origin]
    fallback = history.groupby("StoreId").Sales.mean()
    levels = pd.DataFrame(index=fallback.index)
    for days, name in reversed(list(zip([TAIL_DAYS, *(ORIGIN_BLOCK_DAYS * b for b in LEVEL_BLOCKS)],
                                        LEVEL_NAMES[:-1]))):
        mean = known[known.Date > origin - pd.Timedelta(days=days)].groupby("StoreId").Sales.mean()
        fallback = mean.reindex(levels.index).fillna(fallback)
        levels[name] = fallback
    year = known[known.Date > origin - pd.Timedelta(days=ORIGIN_BLOCK_DAYS * LEVEL_BLOCKS[-1])]
    return levels, year.groupby(["StoreId", "DayOfWeek", "Promo"]).Sales.mean().rename("_day_promo")


def year_ago_view(features: Path, as_of: pd.Timestamp) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(last year's horizon: the train rows dated D-365 .. D-317 as prepared, the same rows seen from the origin D-365
    with their LeadDays and origin levels recomputed as features/recent_level.py does); Date as timestamps."""
    origin = as_of - pd.Timedelta(days=365)
    history = pd.concat([pd.read_parquet(features / split, columns=["StoreId", "Date", "Sales", "DayOfWeek", "Promo"])
                         for split in ("train", "validation")])
    history["Date"] = pd.to_datetime(history.Date)
    train = pd.read_parquet(features / "train")
    train["Date"] = pd.to_datetime(train.Date)
    prepared = train[(train.Date > origin) & (train.Date <= origin + pd.Timedelta(days=ORIGIN_BLOCK_DAYS))]
    levels, day_promo = origin_levels(history, origin)
    rows = prepared.join(levels, on="StoreId", rsuffix="_new").join(day_promo, on=["StoreId", "DayOfWeek", "Promo"])
    for name in LEVEL_NAMES[:-1]:
        rows[name] = rows.pop(f"{name}_new")
    rows[LEVEL_NAMES[-1]] = rows.pop("_day_promo").fillna(rows[LEVEL_NAMES[-2]])
    rows["LeadDays"] = (rows.Date - origin).dt.days
    return prepared.reset_index(drop=True), rows.reset_index(drop=True)


def with_year_ago_origin(attempt: Path, as_of: pd.Timestamp) -> int:
    """Appends the year-ago horizon's rows seen from D-365 to the train split (one more part); the rows added."""
    schema = pq.read_schema(next((attempt / "train").glob("part-*.parquet")))
    _prepared, rows = year_ago_view(attempt, as_of)
    rows["Date"] = rows.Date.dt.date
    table = pa.Table.from_pandas(rows[schema.names], preserve_index=False).cast(schema)
    name = "y-part-00000.parquet"
    pq.write_table(table, attempt / "train" / name)
    register_train_shards(attempt, [{"file": name, "rows": table.num_rows}])
    return table.num_rows


def in_christmas_season(dates: pd.Series) -> pd.Series:
    """1 December .. 6 January: the rush before Christmas and the days up to Epiphany."""
    return (dates.dt.month == 12) | ((dates.dt.month == 1) & (dates.dt.day <= CHRISTMAS_SEASON_LAST_JANUARY_DAY))


def store_phase(stores) -> np.ndarray:
    """store-phased-origins: the days each store's grid of training origins ends before D - 48 (0 .. 47)."""
    return np.asarray(stores, dtype=np.int64) % ORIGIN_BLOCK_DAYS


SEASON_HALF_YEAR_DAYS = 182   # seasonal_index: each day against its store's mean over the days within this
SEASON_SMOOTH_DAYS = 15       # ... and the pooled deviations averaged over the days of the year within this


def seasonal_index(train: pd.DataFrame, as_of: pd.Timestamp) -> pd.Series:
    """Per day of the year (1..366), the chain's log sales on that day of the year against the year around it, from
    train.csv rows dated <= D only: each sold, non-promo day outside the Christmas season with a full year around it
    (dated <= D - 182) less its store's mean over such days within the 365 centred on it, pooled over stores and
    years, and averaged over the days of the year within +-15 days (which also evens out weekdays and paydays); 0
    where no such day exists."""
    rows = train[(train.Date <= as_of) & (train.Sales > 0) & (train.Promo == 0) & ~in_christmas_season(train.Date)]
    rows = rows.assign(log=np.log(rows.Sales)).sort_values(["Store", "Date"])
    centred = (rows.set_index("Date").groupby("Store").log
               .transform(lambda s: s.rolling(f"{2 * SEASON_HALF_YEAR_DAYS + 1}D", center=True).mean()))
    rows["deviation"] = rows.log.to_numpy() - centred.to_numpy()
    first = rows.groupby("Store").Date.transform("min")
    usable = ((rows.Date <= as_of - pd.Timedelta(days=SEASON_HALF_YEAR_DAYS))
              & (rows.Date >= first + pd.Timedelta(days=SEASON_HALF_YEAR_DAYS)))
    by_day = rows[usable].groupby(rows.Date.dt.dayofyear).deviation.agg(["sum", "count"]).reindex(range(1, 367),
                                                                                                 fill_value=0)
    wrapped = pd.concat([by_day.iloc[-SEASON_SMOOTH_DAYS:], by_day, by_day.iloc[:SEASON_SMOOTH_DAYS]])
    window = 2 * SEASON_SMOOTH_DAYS + 1
    sums = wrapped["sum"].rolling(window, center=True).sum().iloc[SEASON_SMOOTH_DAYS:-SEASON_SMOOTH_DAYS]
    counts = wrapped["count"].rolling(window, center=True).sum().iloc[SEASON_SMOOTH_DAYS:-SEASON_SMOOTH_DAYS]
    return (sums / counts.where(counts > 0)).fillna(0.0).set_axis(range(1, 367))


def clean_history(raw: Path, as_of: pd.Timestamp, christmas: bool = False, phased: bool = False,
                  deseasonalized: bool = False) -> pd.DataFrame:
    """The history rows (Sales > 0, dated <= D) not within HOLIDAY_DAYS of a state holiday of their store (known
    on D: train.csv up to D, test.csv's plan after it), or with christmas not in_christmas_season instead, with log
    sales, block and tail flag; phased: the blocks of each store's grid anchored at D - store_phase; deseasonalized:
    each day's log sales less its day of the year's seasonal_index."""
    train = pd.read_csv(raw / "train.csv", parse_dates=["Date"], dtype={"StateHoliday": str})
    plan = pd.read_csv(raw / "test.csv", parse_dates=["Date"], dtype={"StateHoliday": str})
    train = train[train.Date <= as_of]
    if christmas:
        history = train[(train.Sales > 0) & ~in_christmas_season(train.Date)].copy()
    else:
        holidays = pd.concat([train, plan])
        holidays = holidays[holidays.StateHoliday.isin(["a", "b", "c"])][["Store", "Date"]]
        near = pd.concat([holidays.assign(Date=holidays.Date + pd.Timedelta(days=d))
                          for d in range(-HOLIDAY_DAYS, HOLIDAY_DAYS + 1)]).drop_duplicates().assign(near=True)
        history = train[train.Sales > 0].merge(near, on=["Store", "Date"], how="left")
        history = history[history.near.isna()].copy()
    days_before = (as_of - history.Date).dt.days - (store_phase(history.Store) if phased else 0)
    log = np.log(history.Sales)
    if deseasonalized:
        log = log - seasonal_index(train, as_of).reindex(history.Date.dt.dayofyear).to_numpy()
    return history.assign(log=log, block=days_before // ORIGIN_BLOCK_DAYS,
                          tail=(days_before % ORIGIN_BLOCK_DAYS) < TAIL_DAYS)


def clean_levels(history: pd.DataFrame, balanced: bool):
    """A function (store, block of the row, weekday, promo) -> the level features seen from the block's origin,
    with recent_level's fallbacks (a window without sales takes the next longer one, then the store's mean)."""
    by = ["Store", "block", "DayOfWeek"] if balanced else ["Store", "block"]
    sums = history.groupby(by).log.agg(["sum", "count"])
    tails = history[history["tail"]].groupby(by).log.agg(["sum", "count"])
    cells = history.groupby(["Store", "block", "DayOfWeek", "Promo"]).log.agg(["sum", "count"])
    store_mean = history.groupby("Store").log.mean()
    sums, tails, cells = (t.to_dict("index") for t in (sums, tails, cells))

    def mean(table, keys) -> float | None:
        found = [table[k] for k in keys if k in table]
        count = sum(v["count"] for v in found)
        return sum(v["sum"] for v in found) / count if count else None

    def level(table, store, first, last) -> float | None:
        if not balanced:
            return mean(table, [(store, b) for b in range(first, last + 1)])
        days = [m for m in (mean(table, [(store, b, d) for b in range(first, last + 1)]) for d in range(1, 8))
                if m is not None]
        return sum(days) / len(days) if days else None

    def levels(store, block, weekday, promo) -> list[float]:
        origin_block = block + 1
        raw = [level(tails, store, origin_block, origin_block),
               *[level(sums, store, origin_block, origin_block + n - 1) for n in LEVEL_BLOCKS]]
        filled, fallback = [], float(store_mean.get(store, 0.0))
        for value in reversed(raw):
            fallback = value if value is not None else fallback
            filled.insert(0, fallback)
        day_promo = mean(cells, [(store, b, weekday, promo)
                                 for b in range(origin_block, origin_block + LEVEL_BLOCKS[-1])])
        return [*filled, day_promo if day_promo is not None else filled[-1]]
    return levels


def with_clean_levels(attempt: Path, raw: Path, as_of: pd.Timestamp, balanced: bool, christmas: bool = False,
                      phased: bool = False, deseasonalized: bool = False) -> float:
    """Rewrites every split's level features in place (same files, rows and schema); the largest change. phased
    (with christmas): the train split's rows seen from their store's own grid of origins (store_phase), their
    LeadDays too, so each calendar day is seen from every distance across the stores, not from one."""
    levels = clean_levels(clean_history(raw, as_of, christmas, deseasonalized=deseasonalized), balanced)
    phased_levels = clean_levels(clean_history(raw, as_of, christmas, phased=True), balanced) if phased else None
    keys = pd.concat([pd.read_csv(raw / name, parse_dates=["Date"], usecols=["Store", "Date", "DayOfWeek", "Promo"])
                      for name in ("train.csv", "test.csv")])
    keys = keys.rename(columns={"Store": "StoreId"}).drop_duplicates(["StoreId", "Date"])
    caches, largest = {False: {}, True: {}}, 0.0
    for part in sorted(attempt.glob("*/part-*.parquet")):
        table = pq.read_table(part)
        rows = table.select(["StoreId", "Date"]).to_pandas().assign(Date=lambda f: pd.to_datetime(f.Date))
        rows = rows.merge(keys, on=["StoreId", "Date"], how="left")
        in_train = phased and part.parent.name == "train"
        days_before = (as_of - rows.Date).dt.days - (store_phase(rows.StoreId) if in_train else 0)
        blocks = np.where(rows.Date > as_of, -1, days_before // ORIGIN_BLOCK_DAYS)
        cache, source = caches[in_train], phased_levels if in_train else levels
        for key in set(zip(rows.StoreId, blocks, rows.DayOfWeek, rows.Promo)) - cache.keys():
            cache[key] = source(*key)
        values = np.array([cache[key] for key in zip(rows.StoreId, blocks, rows.DayOfWeek, rows.Promo)],
                          dtype=np.float32)
        if in_train:   # the days from the row's origin, the end of the next older block of its store's grid
            lead = (blocks + 1) * ORIGIN_BLOCK_DAYS - days_before.to_numpy()
            assert len(lead) == 0 or (lead.min() >= 1 and lead.max() <= ORIGIN_BLOCK_DAYS), (lead.min(), lead.max())
            table = set_column(table, "LeadDays", lead.astype(np.float32))
        for index, name in enumerate(LEVEL_NAMES):
            column = values[:, index] if len(values) else np.zeros(0, dtype=np.float32)
            old = table.column(name).to_numpy()
            largest = max(largest, float(np.max(np.abs(old - column))) if len(column) else 0.0)
            table = set_column(table, name, column)
        pq.write_table(table, part)
    forget_checksums(attempt)
    return largest


def rewrite_columns(attempt: Path, change) -> int:
    """Applies change(table) -> (table, rows changed) to every split's parts in place (same files, rows and schema);
    the rows changed in all."""
    changed = 0
    for part in sorted(attempt.glob("*/part-*.parquet")):
        table, count = change(pq.read_table(part))
        changed += count
        pq.write_table(table, part)
    forget_checksums(attempt)
    return changed


def forget_checksums(attempt: Path) -> None:
    """The parts changed: their Hadoop checksum files would no longer match (Spark would refuse to read them)."""
    manifest_path = attempt.parents[1] / "_SUCCESS"
    manifest = json.loads(manifest_path.read_text())
    for crc in attempt.glob("*/.part-*.crc"):
        crc.unlink()
    manifest["files"] = [f for f in manifest["files"] if not f.split("/")[-1].startswith(".part-")]
    manifest_path.write_text(json.dumps(manifest))


def set_column(table: pa.Table, name: str, values: np.ndarray) -> pa.Table:
    field = table.schema.field(name)
    return table.set_column(table.schema.get_field_index(name), field, pa.array(values, field.type))


def without(columns: list[str]):
    """The columns held at 0 (a categorical's unknown index, a continuous value's 0): nothing left to learn from."""
    def change(table: pa.Table) -> tuple[pa.Table, int]:
        missing = [name for name in columns if name not in table.column_names]
        if missing:   # the Before counts: not written since spec.UNFED_SEED_COLS (session 39)
            raise SystemExit(f"{missing}: not in these prepared features; a cell of an earlier product has them")
        for name in columns:
            table = set_column(table, name, np.zeros(table.num_rows, dtype=table.column(name).to_numpy().dtype))
        return table, table.num_rows
    return change


def events_within_reach(table: pa.Table) -> tuple[pa.Table, int]:
    """Each row's upcoming events cut at its origin + ORIGIN_BLOCK_DAYS (its block's last day; the plan's end for
    the horizon, whose rows are unchanged): Before<Event> counts down to that day, DaysTo<Event> is the cap."""
    reach = ORIGIN_BLOCK_DAYS - table.column("LeadDays").to_numpy().astype(np.int64)
    changed = np.zeros(table.num_rows, dtype=bool)
    for event in EVENTS:
        before = table.column(f"Before{event}").to_numpy().astype(np.int64)
        hidden = -before > reach
        changed |= hidden
        table = set_column(table, f"Before{event}", np.where(hidden, -reach, before).astype(np.float32))
        table = set_column(table, f"DaysTo{event}", np.where(hidden, NEAR_EVENT_DAYS + 1,   # the cap's index
                                                             table.column(f"DaysTo{event}").to_numpy()))
    return table, int(changed.sum())


def level_deltas(table: pa.Table) -> tuple[pa.Table, int]:
    """The origin levels as the longest window's level and each shorter window's difference from the next longer
    one (the weekday-promo level's from the 384-day level): the same information, but after the model's batch
    normalization a recent change is as large an input as the level itself."""
    levels = {name: table.column(name).to_numpy().astype(np.float64) for name in LEVEL_NAMES}
    windows = LEVEL_NAMES[:-1]                     # StoreLevel14d .. StoreLevel384d, shortest first
    deltas = {name: levels[name] - levels[longer] for name, longer in zip(windows, windows[1:])}
    deltas[LEVEL_NAMES[-1]] = levels[LEVEL_NAMES[-1]] - levels[windows[-1]]
    for name, values in deltas.items():
        table = set_column(table, name, values.astype(np.float32))
    return table, table.num_rows


TREND_WINDOW_DAYS = ORIGIN_BLOCK_DAYS * LEVEL_BLOCKS[1]   # the 144-day level's window


def trend_since_level(attempt: Path):
    """Each row's trend and trend_de as a ratio to their mean over the TREND_WINDOW_DAYS up to the row's origin
    (Date - LeadDays), from the train and validation rows (all dated <= D): how far the trend moved since the window
    that the row's recent sales levels were measured over. A row without such days keeps a ratio of 1."""
    parts = [part for split in ("train", "validation") for part in sorted((attempt / split).glob("part-*.parquet"))]
    known = pd.concat([pq.read_table(part, columns=["StoreId", "Date", "trend", "trend_de"]).to_pandas()
                       for part in parts])
    known["Date"] = pd.to_datetime(known["Date"])
    days = pd.date_range(known["Date"].min(), known["Date"].max())
    cumulative = {}
    for store, rows in known.groupby("StoreId"):
        daily = rows.set_index("Date")[["trend", "trend_de"]].reindex(days)
        present = daily.notna().all(axis=1).astype(float).to_numpy()
        values = daily.fillna(0.0).to_numpy()
        cumulative[store] = (np.vstack([np.zeros((1, 2)), np.cumsum(values, axis=0)]),
                             np.concatenate([[0.0], np.cumsum(present)]))
    first = days[0]

    def change(table: pa.Table) -> tuple[pa.Table, int]:
        frame = table.select(["StoreId", "Date", "LeadDays", "trend", "trend_de"]).to_pandas()
        lead = pd.to_timedelta(frame["LeadDays"].astype(int), unit="D")
        origin = (pd.to_datetime(frame["Date"]) - lead - first).dt.days
        end = np.clip(origin.to_numpy() + 1, 0, len(days))
        start = np.clip(end - TREND_WINDOW_DAYS, 0, len(days))
        current = frame[["trend", "trend_de"]].to_numpy()
        ratios = np.ones((len(frame), 2))
        for store, index in frame.groupby("StoreId").indices.items():
            if store not in cumulative:
                continue
            sums, counts = cumulative[store]
            n = counts[end[index]] - counts[start[index]]
            mean = (sums[end[index]] - sums[start[index]]) / np.maximum(n, 1)[:, None]
            ok = (n > 0)[:, None] & (mean > 0)
            ratios[index] = np.where(ok, current[index] / np.where(ok, mean, 1.0), 1.0)
        table = set_column(table, "trend", ratios[:, 0].astype(np.float32))
        table = set_column(table, "trend_de", ratios[:, 1].astype(np.float32))
        return table, table.num_rows
    return change


def run_variant(cell: Path, raw: Path, as_of: pd.Timestamp, variant: str, workdir: Path,
                train_args: list[str] = (), suffix: str = "") -> dict:
    """variant: one of VARIANTS, or several joined by "+", applied in turn (a year-ago-origin last: the rows it adds
    are copies of train rows as the earlier changes left them)."""
    dest = workdir / "horizon-level" / f"{variant}-{cell.parent.name}-{cell.name}{suffix}"
    attempt = copy_features(cell, dest)
    facts = {}
    for part in variant.split("+"):
        facts.update(change_features(attempt, raw, as_of, part))
    run = bft.train_and_predict(dest, "run", str(raw), str(dest / "features"), ["--num-proc", "2", *train_args])
    return {**facts, "train_s": run["timings_s"]["train"], **horizon_scores(cell, bft.run_dir(dest, "run"))}


def change_features(attempt: Path, raw: Path, as_of: pd.Timestamp, variant: str) -> dict:
    facts = {}
    if variant == "as-prepared":
        pass   # the cell's features retrained as they are: the baseline for another training seed
    elif variant == "refit":
        with_validation_in_train(attempt)
    elif variant == "level-deltas":
        facts["rows_changed"] = rewrite_columns(attempt, level_deltas)
    elif variant == "christmas-clean":
        facts["largest_level_change"] = with_clean_levels(attempt, raw, as_of, balanced=False, christmas=True)
    elif variant == "deseasonalized-levels":
        facts["largest_level_change"] = with_clean_levels(attempt, raw, as_of, balanced=False, christmas=True,
                                                          deseasonalized=True)
    elif variant == "store-phased-origins":
        facts["largest_level_change"] = with_clean_levels(attempt, raw, as_of, balanced=False, christmas=True,
                                                          phased=True)
    elif variant == "year-ago-origin":
        facts["rows_added"] = with_year_ago_origin(attempt, as_of)
    elif variant == "events-within-reach":
        facts["rows_changed"] = rewrite_columns(attempt, events_within_reach)
    elif variant == "trend-since-level":
        facts["rows_changed"] = rewrite_columns(attempt, trend_since_level(attempt))
    elif variant.startswith("without-"):
        facts["rows_changed"] = rewrite_columns(attempt, without(WITHOUT_GROUPS[variant.removeprefix("without-")]))
    else:
        facts["largest_level_change"] = with_clean_levels(attempt, raw, as_of, variant.endswith("balanced"))
    return facts


def stored_model(cell: Path):
    """The forward pass of the cell's committed model, opened and checked as predict and the gate open it (the
    cell's folder as the storage root, whose runs/ holds it)."""
    from rossmann_jobs.model.forward_pass import ForwardPass
    from rossmann_jobs.model.store import open_model

    source = open_model(str(cell / "runs" / "run" / "model"), root=str(cell))
    return ForwardPass(source.artifact, source.weights_bytes(), source.attempt)


def forward_probes(cell: Path) -> dict:
    """The median change of the stored model's horizon log forecast under each probe (see the module's docstring),
    and the median log(expected / forecast) of the validation window and the horizon (rows that sold)."""
    forward = stored_model(cell)
    features = committed_dir(cell / "features")
    test, validation = pd.read_parquet(features / "test"), pd.read_parquet(features / "validation")
    base = forward(test)

    def change(rows: pd.DataFrame) -> float:
        return round(float(np.median(forward(rows) - base)), 4)

    last = validation.sort_values("Date").groupby("State")[["trend", "trend_de"]].last()
    persisted = test.assign(**{name: last.loc[test.State, name].to_numpy() for name in ("trend", "trend_de")})
    probes = {"trend_x1.1": change(test.assign(trend=test.trend * 1.1, trend_de=test.trend_de * 1.1)),
              "trend_persisted": change(persisted)}
    far = test.copy()
    for event in EVENTS:
        to_plan_end = (test.LeadDays - test[f"Before{event}"]) == ORIGIN_BLOCK_DAYS
        probes[f"Before{event}_-60_share"] = round(float(to_plan_end.mean()), 3)
        probes[f"Before{event}_-60"] = change(test.assign(**{f"Before{event}": test[f"Before{event}"].where(
            ~to_plan_end, -60.0)}))
        far[f"Before{event}"] = far[f"Before{event}"].where(~to_plan_end, -60.0)
    probes["Before_all_-60"] = change(far)
    # How much of a unit change in each origin level reaches the forecast (1.0: all of it).
    for name in LEVEL_NAMES:
        probes[f"{name}_+0.05_per_unit"] = round(change(test.assign(**{name: test[name] + 0.05})) / 0.05, 2)
    probes["all_levels_+0.05_per_unit"] = round(change(test.assign(**{n: test[n] + 0.05 for n in LEVEL_NAMES})) / 0.05,
                                                2)
    # Last year's horizon rows from their own training origins and from D-365, as the horizon is seen from D: the
    # median log(expected / forecast) by lead week from D-365 (a view training never shows but with year-ago-origin).
    as_of = pd.to_datetime(test.Date).min() - pd.Timedelta(days=1)
    prepared, from_year_ago = year_ago_view(features, as_of)
    expected = np.log(prepared[["StoreId", "Date"]].merge(truth(cell), on=["StoreId", "Date"], how="left")
                      .ExpectedSales.to_numpy())
    week = lead_week_of(from_year_ago.LeadDays)
    for view, frame in (("own_origins", prepared), ("from_D-365", from_year_ago)):
        error = expected - forward(frame)
        probes[f"year_ago_horizon_{view}_by_lead_week"] = [round(float(np.median(error[week == w])), 4)
                                                          for w in range(1, LEAD_WEEKS + 1)]
    rows = predictions(cell / "runs" / "run").merge(truth(cell), on=["StoreId", "Date"])
    for split in ("validation", "test"):
        sold = rows[(rows.split == split) & (rows.Sales > 0)]
        probes[f"{split}_median_log_expected_over_forecast"] = round(
            float(np.median(np.log(sold.ExpectedSales) - sold.LogSalesForecast)), 4)
    return probes


def origin_swap(horizon_cell: Path, later_cell: Path) -> dict:
    """The horizon_cell model's median log(expected / forecast) on its horizon rows that are validation rows of
    later_cell (a drop some weeks later, the same scenario), with the horizon's own inputs and with one group at a
    time taken from later_cell's view of the same rows: its trend and Before<Event> counts (known then), its lead
    and origin levels (seen from an earlier origin), or one level alone. Which inputs make the horizon's bias."""
    forward = stored_model(horizon_cell)
    keys = ["StoreId", "Date"]
    horizon = pd.read_parquet(committed_dir(horizon_cell / "features") / "test")
    later = pd.read_parquet(committed_dir(later_cell / "features") / "validation")
    horizon = horizon.merge(later[keys], on=keys).sort_values(keys).reset_index(drop=True)
    later = later.merge(horizon[keys], on=keys).sort_values(keys).reset_index(drop=True)
    expected = horizon[keys].assign(Date=pd.to_datetime(horizon.Date)).merge(truth(horizon_cell), on=keys, how="left")
    sold = (expected.ExpectedSales > 0).to_numpy()

    def bias(rows: pd.DataFrame) -> float:
        return round(float(np.median(np.log(expected.ExpectedSales[sold]) - forward(rows)[sold])), 4)

    def swapped(*names: str) -> float:
        return bias(horizon.assign(**{name: later[name].to_numpy() for name in names}))

    known_later = ["trend", "trend_de", *(f"Before{event}" for event in EVENTS)]
    return {"rows": int(sold.sum()), "dates": [str(horizon.Date.min()), str(horizon.Date.max())],
            "horizon_inputs": bias(horizon), "trend_and_before_from_later": swapped(*known_later),
            "lead_and_levels_from_later": swapped("LeadDays", *LEVEL_NAMES),
            **{f"{name}_from_later": swapped(name) for name in LEVEL_NAMES},
            **{f"{name}_mean_change": round(float((horizon[name] - later[name]).mean()), 4) for name in LEVEL_NAMES}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="bench_robustness.py's --workdir")
    parser.add_argument("--cells", required=True, help="scenario-stores:label:as-of, comma-separated")
    parser.add_argument("--variants", default="", help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--probes", action="store_true", help="the stored models' forward-pass probes")
    parser.add_argument("--origin-swap", default="", help="SCENARIO-STORES:HORIZON_LABEL:LATER_LABEL: origin_swap's "
                        "probe of the horizon cell's model on the rows the later cell validates on")
    parser.add_argument("--train-args", default="", help='more train job arguments, e.g. "--seed 43"')
    parser.add_argument("--run-suffix", default="", help="appended to each variant's run folder, e.g. -seed43")
    parser.add_argument("--name", default="try")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = {part for v in variants for part in v.split("+")} - set(VARIANTS)
    if unknown:
        parser.error(f"--variants: {sorted(unknown)} unknown")
    record = {"cells": {}}
    if args.origin_swap:
        scenario, horizon_label, later_label = args.origin_swap.split(":")
        scenario_dir = args.workdir / scenario
        record["origin_swap"] = origin_swap(scenario_dir / horizon_label, scenario_dir / later_label)
        print(f"== origin swap {args.origin_swap}: {json.dumps(record['origin_swap'])}", flush=True)
    pooled = []
    for spec in args.cells.split(","):
        scenario, label, day = spec.split(":")
        cell, as_of = args.workdir / scenario / label, pd.Timestamp(day)
        raw = args.workdir / scenario / "drops" / day
        errors = lead_errors(cell, as_of)
        pooled.append(errors)
        fits = {split: np.polyfit(g.lead, g.err, 1) for split, g in errors.groupby("split")}
        entry = {"as_of": day, "lead_fit": {split: {"at_lead_1": float(k[1] + k[0]), "change_over_48_days":
                                                    float(48 * k[0])} for split, k in fits.items()},
                 "product": horizon_scores(cell, cell / "runs" / "run")}
        if args.probes:
            entry["probes"] = forward_probes(cell)
            print(f"== {spec}: probes {json.dumps(entry['probes'])}", flush=True)
        for variant in variants:
            print(f"== {spec}: {variant}", flush=True)
            entry[variant] = run_variant(cell, raw, as_of, variant, args.workdir, shlex.split(args.train_args),
                                         args.run_suffix)
        record["cells"][spec] = entry
    both = pd.concat(pooled)
    record["median_error_by_lead_pooled"] = {split: [round(float(v), 4) for v in g.groupby("lead").err.median()]
                                             for split, g in both.groupby("split")}
    out = Path(__file__).resolve().parent / "out" / f"horizon_level_{args.name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    print("\n| cell | validation: error at lead 1, change over 48 days | horizon: the same |")
    print("|---|---|---|")
    for spec, entry in record["cells"].items():
        fit = entry["lead_fit"]
        print(f"| {spec} | {fit['validation']['at_lead_1']:+.3f}, {fit['validation']['change_over_48_days']:+.3f} "
              f"| {fit['test']['at_lead_1']:+.3f}, {fit['test']['change_over_48_days']:+.3f} |")
    print("\n| cell | run | exp-RMSPE | median log error | by lead week | P10-P90 coverage | wQL vs naive |")
    print("|---|---|---:|---:|---|---:|---:|")
    for spec, entry in record["cells"].items():
        for run in ("product", *variants):
            s = entry[run]
            print(f"| {spec} | {run} | {s['exp_rmspe']:.4f} | {s['median_log_error']:+.3f} | "
                  f"{' '.join(f'{v:+.3f}' for v in s['median_log_error_by_lead_week'])} | {100 * s['coverage']:.1f} % "
                  f"| {100 * s['wql_vs_naive']:+.1f} % |")
    print(f"\nJSON: {out}")


if __name__ == "__main__":
    main()
