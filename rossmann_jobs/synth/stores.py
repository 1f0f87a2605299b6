"""Store attributes (store.csv, store_states.csv) and each store's hidden traits that the sales model reads."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from rossmann_jobs.synth.states import STORE_STATE_COUNTS

REAL_STORE_COUNT = 1115
STORE_TYPE_COUNTS = {"b": 17, "a": 602, "c": 148, "d": 348}  # b first: a tiny data set still has one
PROMO_INTERVALS = ("Jan,Apr,Jul,Oct", "Feb,May,Aug,Nov", "Mar,Jun,Sept,Dec")
PROMO_INTERVAL_MONTHS = ((1, 4, 7, 10), (2, 5, 8, 11), (3, 6, 9, 12))
PROMO_INTERVAL_COUNTS = (335, 130, 106)
PROMO2_STORES = 544
PROMO2_SINCE_YEAR_COUNTS = {2009: 73, 2010: 64, 2011: 128, 2012: 81, 2013: 120, 2014: 95, 2015: 22}
COMPETITION_SINCE_BLANK = 354
COMPETITION_DISTANCE_BLANK = 3
# Competitors opened mostly in recent years (the real mode is 2013); a long tail back to 1961.
COMPETITION_YEAR_WEIGHTS = {
    **{year: 0.6 for year in range(1961, 2000)},
    2000: 10, 2001: 16, 2002: 27, 2003: 19, 2004: 22, 2005: 62, 2006: 47, 2007: 48, 2008: 54, 2009: 54,
    2010: 55, 2011: 54, 2012: 82, 2013: 83, 2014: 70, 2015: 38,
}
COMPETITION_MONTH_WEIGHTS = (5, 4, 9, 8, 6, 7, 8, 6, 16, 12, 12, 7)
OTHER_SUNDAY_OPEN_STORES = 16   # besides every StoreType b
REFURBISHED_SHARE = 0.03        # stores closed for a few weeks once in the train period

LEVEL_SIGMA = 0.33              # spread of store sales levels (lognormal, truncated at 2.5 sigma)
GROWTH_SIGMA = 0.04             # per-store yearly sales trend
BASKET_BY_TYPE = {"a": 8.5, "b": 5.0, "c": 8.6, "d": 11.2}  # mean euros per customer


@dataclass(frozen=True)
class Stores:
    """One entry per store, index i = Store i + 1. Blank CSV values are NaN (floats) or 0 (ints)."""

    store_id: np.ndarray
    store_type: np.ndarray             # 'a'..'d'
    assortment: np.ndarray             # 'a'..'c'
    state: np.ndarray                  # state code, e.g. 'NW', 'HB,NI'
    competition_distance: np.ndarray   # metres, NaN = blank
    competition_open_month: np.ndarray  # 0 = blank
    competition_open_year: np.ndarray   # 0 = blank; one store has 1900
    promo2: np.ndarray                 # 0/1
    promo2_since_week: np.ndarray      # 0 = blank
    promo2_since_year: np.ndarray      # 0 = blank
    promo_interval: np.ndarray         # index into PROMO_INTERVALS, -1 = blank
    sunday_open: np.ndarray            # hidden: opens on Sundays
    level: np.ndarray                  # hidden: store's own sales level factor
    growth: np.ndarray                 # hidden: yearly log-growth of sales
    basket: np.ndarray                 # hidden: euros per customer
    refurbish_first_day: np.ndarray    # hidden: first closed day index, -1 = never
    refurbish_days: np.ndarray

    @property
    def count(self) -> int:
        return len(self.store_id)


def scaled_counts(real_counts: list[int] | tuple[int, ...], total: int) -> np.ndarray:
    """Split `total` in the proportions of real_counts (largest remainder), exact at the real total. Every
    category gets at least one item; when total is smaller than the number of categories, the first ones do."""
    counts = np.zeros(len(real_counts), dtype=int)
    if total <= len(real_counts):
        counts[:total] = 1
        return counts
    weights = np.asarray(real_counts, dtype=float)
    raw = total * weights / weights.sum()
    counts += np.floor(raw).astype(int)
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[: total - counts.sum()]] += 1
    for category in np.flatnonzero(counts == 0):
        counts[int(np.argmax(counts))] -= 1
        counts[category] = 1
    return counts


def scaled_count(real_count: int, total: int, at_least: int = 0) -> int:
    """A quirk's count scaled from the real 1,115 stores to `total` stores."""
    return min(total, max(at_least, int(round(real_count * total / REAL_STORE_COUNT))))


def _shuffled_labels(labels: list, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(np.repeat(np.array(labels, dtype=object), counts))


def _weighted_choice(rng: np.random.Generator, weights: dict | tuple, size: int) -> np.ndarray:
    keys = np.array(list(weights) if isinstance(weights, dict) else range(1, len(weights) + 1))
    values = np.array(list(weights.values()) if isinstance(weights, dict) else weights, dtype=float)
    return rng.choice(keys, size=size, p=values / values.sum())


def generate_stores(count: int, rng: np.random.Generator, num_train_days: int) -> Stores:
    store_type = _shuffled_labels(list(STORE_TYPE_COUNTS), scaled_counts(list(STORE_TYPE_COUNTS.values()), count), rng)
    state = _shuffled_labels(list(STORE_STATE_COUNTS), scaled_counts(list(STORE_STATE_COUNTS.values()), count), rng)
    is_b = store_type == "b"

    # Assortment b (extra) exists only in StoreType b stores, as in the real data.
    assortment = np.where(rng.random(count) < 0.53, "a", "c").astype(object)
    b_assortment = rng.choice(np.array(["a", "b", "c"], dtype=object), size=count, p=[0.4, 0.55, 0.05])
    assortment[is_b] = b_assortment[is_b]
    if is_b.any():
        assortment[np.flatnonzero(is_b)[0]] = "b"

    distance = np.clip(np.round(np.exp(rng.normal(np.log(2300.0), 1.1, count)), -1), 20, 75860)
    since_blank = np.zeros(count, dtype=bool)
    since_blank[rng.permutation(count)[: scaled_count(COMPETITION_SINCE_BLANK, count)]] = True
    # The stores without a distance are among those without an opening date (no known competitor at all).
    pool = np.flatnonzero(since_blank) if since_blank.any() else np.arange(count)
    distance[rng.choice(pool, size=min(len(pool), scaled_count(COMPETITION_DISTANCE_BLANK, count, 1)),
                        replace=False)] = np.nan
    open_year = _weighted_choice(rng, COMPETITION_YEAR_WEIGHTS, count)
    open_month = _weighted_choice(rng, COMPETITION_MONTH_WEIGHTS, count)
    known = np.flatnonzero(~since_blank)
    if len(known):
        open_year[rng.choice(known)] = 1900
    open_year[since_blank] = 0
    open_month[since_blank] = 0

    promo2 = np.zeros(count, dtype=int)
    promo2[rng.permutation(count)[: scaled_count(PROMO2_STORES, count, 1)]] = 1
    since_year = _weighted_choice(rng, PROMO2_SINCE_YEAR_COUNTS, count)
    since_week = np.where(since_year == 2015, rng.integers(1, 28, count), rng.integers(1, 51, count))
    interval = _weighted_choice(rng, PROMO_INTERVAL_COUNTS, count) - 1
    no_promo2 = promo2 == 0
    since_year[no_promo2], since_week[no_promo2], interval[no_promo2] = 0, 0, -1

    sunday_open = is_b.copy()
    others = np.flatnonzero(~is_b)
    sunday_open[rng.choice(others, size=min(len(others), scaled_count(OTHER_SUNDAY_OPEN_STORES, count)),
                           replace=False)] = True

    refurbished = rng.random(count) < REFURBISHED_SHARE
    refurbish_days = np.where(refurbished, rng.integers(14, 61, count), 0)
    refurbish_first_day = np.where(refurbished, rng.integers(0, num_train_days - 60, count), -1)

    basket = np.array([BASKET_BY_TYPE[t] for t in store_type]) * np.exp(rng.normal(0.0, 0.1, count))
    return Stores(
        store_id=np.arange(1, count + 1),
        store_type=store_type,
        assortment=assortment,
        state=state,
        competition_distance=distance,
        competition_open_month=open_month,
        competition_open_year=open_year,
        promo2=promo2,
        promo2_since_week=since_week,
        promo2_since_year=since_year,
        promo_interval=interval,
        sunday_open=sunday_open,
        level=np.exp(np.clip(rng.normal(0.0, LEVEL_SIGMA, count), -2.5 * LEVEL_SIGMA, 2.5 * LEVEL_SIGMA)),
        growth=rng.normal(0.0, GROWTH_SIGMA, count),
        basket=basket,
        refurbish_first_day=refurbish_first_day,
        refurbish_days=refurbish_days,
    )


def scale_growth(stores: Stores, scale: float) -> Stores:
    """The stores with each yearly log-growth multiplied by scale, applied after the draws so that no other draw moves
    (scale 1 returns the stores themselves: the default data set stays byte-identical)."""
    return stores if scale == 1.0 else replace(stores, growth=stores.growth * scale)
