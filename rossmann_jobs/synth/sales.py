"""The multiplicative sales model: noise-free expected sales per (day, store), then the observed Sales and Customers.

Every factor is a function of what the reference pipeline derives from the raw files (day of week, Promo and the
Before/After day counts, holidays, CompetitionMonthsOpen, Promo2Weeks, weather, trend, store, date parts), so a model
fed the prepared features can in principle reach the noise floor. See the package README for the formula.
"""
from __future__ import annotations

import datetime as dt

import numpy as np

from rossmann_jobs.synth.dataset_calendar import Calendar, days_since_event, days_until_event
from rossmann_jobs.synth.stores import PROMO_INTERVAL_MONTHS, Stores
from rossmann_jobs.synth.weather import FOG, HAIL, RAIN, SNOW, THUNDERSTORM, Weather

BASE_SALES = 6360.0   # calibrated so that the full-scale mean Sales over all train rows is ~5,774
STORE_TYPE_LEVEL = {"a": 1.0, "b": 1.45, "c": 1.0, "d": 0.98}
ASSORTMENT_LEVEL = {"a": 0.97, "b": 0.9, "c": 1.05}
DAY_OF_WEEK = np.array([1.13, 1.02, 0.97, 0.96, 1.02, 0.87, 1.15])   # Monday .. Sunday
MONTH = np.array([0.93, 0.95, 0.98, 1.0, 1.0, 1.0, 1.02, 0.99, 0.97, 0.98, 1.02, 1.10])
CHRISTMAS_RUSH = 0.15         # extra share reached on Dec 24, growing quadratically from Dec 1
PAYDAY = {1: 1.06, 2: 1.05, 3: 1.03, 29: 1.02, 30: 1.03, 31: 1.04}   # day of month
PROMO = 1.30
AFTER_PROMO_DIP, AFTER_PROMO_DAYS = 0.06, 3.0      # customers stocked up during the promo
BEFORE_PROMO_DIP, BEFORE_PROMO_DAYS = 0.04, 2.0    # ... or wait for it
BEFORE_HOLIDAY_RUSH, BEFORE_HOLIDAY_DAYS = 0.30, 1.2
AFTER_HOLIDAY_REBOUND, AFTER_HOLIDAY_DAYS = 0.12, 1.5
OPEN_ON_HOLIDAY = 0.85
SCHOOL_HOLIDAY = 1.04
COMPETITION_IMPACT, COMPETITION_RANGE_M, COMPETITION_RAMP_DAYS = 0.25, 3000.0, 720
PROMO2_LIFT, PROMO2_RAMP_WEEKS, PROMO2_MONTH = 0.05, 25, 1.03
HEAT_PER_DEGREE, HEAT_FROM_C = 0.006, 25      # hot days keep shoppers away
COLD_PER_DEGREE = 0.004                        # per degree of Max_TemperatureC below 0
EVENT_FACTORS = {FOG: 0.99, RAIN: 0.98, SNOW: 0.94, HAIL: 0.98, THUNDERSTORM: 0.97}
TREND_ELASTICITY, TREND_DE_ELASTICITY = 0.4, 0.2   # on the trend relative to its file's mean
CUSTOMER_NOISE_SHARE, CUSTOMER_OWN_NOISE = 0.7, 0.05


def _decay(days: np.ndarray, size: float, scale: float) -> np.ndarray:
    """size at 1 day away, decaying exponentially; days < 1 (the event day itself) give 0."""
    return np.where(days >= 1, size * np.exp(-(days - 1) / scale), 0.0)


def competition_days_open(calendar: Calendar, stores: Stores) -> np.ndarray:
    """[day, store] CompetitionDaysOpen exactly as the reference computes it (0 for blank or 1900 dates)."""
    known = stores.competition_open_year > 1900
    opened = np.array([np.datetime64(dt.date(int(y), int(m), 15)) if k else np.datetime64("1900-01-15")
                       for y, m, k in zip(stores.competition_open_year, stores.competition_open_month, known)])
    days = (calendar.dates[:, None] - opened[None, :]).astype(int)
    return np.where(known[None, :], np.clip(days, 0, COMPETITION_RAMP_DAYS), 0)


def promo2_days(calendar: Calendar, stores: Stores) -> tuple[np.ndarray, np.ndarray]:
    """[day, store] (Promo2Days, started): Promo2Days as the reference computes it (days since Jan 1 of
    Promo2SinceYear + 7 (Promo2SinceWeek - 1), within 0 .. 25 weeks; 0 without Promo2) and whether it has begun."""
    active = stores.promo2_since_year > 1900
    since = np.array([np.datetime64(dt.date(int(y), 1, 1)) + np.timedelta64(7 * (int(w) - 1), "D") if a
                      else np.datetime64("1900-01-01")
                      for y, w, a in zip(stores.promo2_since_year, stores.promo2_since_week, active)])
    days = (calendar.dates[:, None] - since[None, :]).astype(int)
    return np.where(active[None, :], np.clip(days, 0, 7 * PROMO2_RAMP_WEEKS), 0), days >= 0


def weather_factor(weather: Weather, scale: float = 1.0) -> np.ndarray:
    """[day, state] sales factor of the day's weather: heat and cold keep shoppers away, and so do events.

    scale multiplies the effect in log terms (factor ** scale): 0 = no weather effect, 2 = twice as strong.
    """
    max_temp = weather.values["Max_TemperatureC"]
    event_effect = np.ones(weather.events.shape)
    for bit, factor in EVENT_FACTORS.items():
        event_effect *= np.where(weather.events & bit, factor, 1.0)
    factor = ((1 - HEAT_PER_DEGREE * np.clip(max_temp - HEAT_FROM_C, 0, None))
              * (1 - COLD_PER_DEGREE * np.clip(-max_temp, 0, None)) * event_effect)
    # Skipped at 1 so that the default data set stays byte-identical to the one before the knob existed.
    return factor if scale == 1.0 else factor ** scale


def trend_factor(trend_state: np.ndarray, trend_de: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """[day, store] sales factor of the relative Google trend of the store's state ([day, store]) and of Germany
    ([day]); scale multiplies both elasticities (0 = no trend effect)."""
    return trend_state ** (TREND_ELASTICITY * scale) * (trend_de ** (TREND_DE_ELASTICITY * scale))[:, None]


def sales_factors(calendar: Calendar, stores: Stores, state_of_store: np.ndarray, holiday: np.ndarray,
                  school: np.ndarray, promo: np.ndarray, weather: Weather, trend_state: np.ndarray,
                  trend_de: np.ndarray, *, weather_scale: float = 1.0, trend_scale: float = 1.0,
                  shift: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The model's factors, each broadcastable to [day, store]; their product is the expected sales of an open store.

    holiday and school are [day, state]; state_of_store maps each store to its state column (weather and holidays);
    trend_state is [day, store] and trend_de [day], both as the reference pipeline joins them and divided by the mean
    of their googletrend file (so the trend moves sales, but not their overall level). weather_scale and trend_scale
    scale those effects in log terms; shift ([day, store], synth/shifts.py) adds permanent level shifts as the factor
    "shift" (absent when None, which keeps the product, and so the default data set, bit for bit as before).
    """
    years_from_mid = (np.arange(calendar.num_days) - calendar.num_train_days / 2)[:, None] / 365.25
    level = (BASE_SALES * stores.level * np.array([STORE_TYPE_LEVEL[t] for t in stores.store_type])
             * np.array([ASSORTMENT_LEVEL[a] for a in stores.assortment]))

    december = calendar.month == 12
    season = MONTH[calendar.month - 1] * (1 + CHRISTMAS_RUSH * december * (np.minimum(calendar.day, 24) / 24) ** 2)
    payday = np.array([PAYDAY.get(day, 1.0) for day in calendar.day.tolist()])

    after_promo, before_promo = days_since_event(promo), days_until_event(promo)
    promo_effect = np.where(promo, PROMO, (1 - _decay(after_promo, AFTER_PROMO_DIP, AFTER_PROMO_DAYS))
                            * (1 - _decay(before_promo, BEFORE_PROMO_DIP, BEFORE_PROMO_DAYS)))

    is_holiday = holiday > 0
    holiday_effect = np.where(
        is_holiday, OPEN_ON_HOLIDAY,
        (1 + _decay(days_until_event(is_holiday), BEFORE_HOLIDAY_RUSH, BEFORE_HOLIDAY_DAYS))
        * (1 + _decay(days_since_event(is_holiday), AFTER_HOLIDAY_REBOUND, AFTER_HOLIDAY_DAYS)))

    closeness = np.nan_to_num(np.exp(-stores.competition_distance / COMPETITION_RANGE_M), nan=0.0)
    # A competitor with an unknown (or 1900) opening date has been there all along: full impact.
    ramp = np.where(stores.competition_open_year > 1900,
                    competition_days_open(calendar, stores) / COMPETITION_RAMP_DAYS, 1.0)
    promo2_ramp_days, promo2_started = promo2_days(calendar, stores)
    in_interval = np.zeros((calendar.num_days, stores.count), dtype=bool)
    for interval, months in enumerate(PROMO_INTERVAL_MONTHS):
        in_interval |= np.isin(calendar.month, months)[:, None] & (stores.promo_interval == interval)[None, :]
    promo2_weeks = promo2_ramp_days // 7
    promo2_effect = ((1 + PROMO2_LIFT * promo2_weeks / PROMO2_RAMP_WEEKS)
                     * np.where(in_interval & promo2_started & (stores.promo2 == 1)[None, :], PROMO2_MONTH, 1.0))


    return {
        "store": level[None, :] * np.exp(stores.growth[None, :] * years_from_mid),
        "day_of_week": DAY_OF_WEEK[calendar.day_of_week - 1][:, None],
        "season": (season * payday)[:, None],
        "promo": promo_effect[:, None],
        "state_holiday": holiday_effect[:, state_of_store],
        "school_holiday": np.where(school, SCHOOL_HOLIDAY, 1.0)[:, state_of_store],
        "competition": 1 - COMPETITION_IMPACT * closeness[None, :] * ramp,
        "promo2": promo2_effect,
        "weather": weather_factor(weather, weather_scale)[:, state_of_store],
        "trend": trend_factor(trend_state, trend_de, trend_scale),
        **({} if shift is None else {"shift": shift}),
    }


def expected_sales(factors: dict[str, np.ndarray], is_open: np.ndarray) -> np.ndarray:
    """[day, store] noise-free expected sales: the product of all factors where open, 0 where closed."""
    product = np.ones(is_open.shape)
    for factor in factors.values():
        product = product * factor
    return np.where(is_open, product, 0.0)


def observe(expected: np.ndarray, sigma: float, basket: np.ndarray, zero_sales: np.ndarray,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(Sales, Customers) as integers: Sales = round(expected * exp(eps)), eps ~ N(0, sigma^2); 0 when closed.

    Customers follow the same shock (partly) divided by the store's basket size; both are 0 on zero_sales rows.
    """
    eps = rng.normal(0.0, 1.0, expected.shape) * sigma
    own = rng.normal(0.0, CUSTOMER_OWN_NOISE, expected.shape)
    sales = np.rint(expected * np.exp(eps)).astype(np.int64)
    sales[zero_sales] = 0
    customers = np.rint(expected * np.exp(CUSTOMER_NOISE_SHARE * eps + own) / basket[None, :]).astype(np.int64)
    customers = np.where(sales > 0, np.maximum(customers, 1), 0)
    return sales, customers
