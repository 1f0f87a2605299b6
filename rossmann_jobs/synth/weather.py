"""Daily weather per state (weather.csv): seasonal temperature, wet spells, events, and the real missing-value rates."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rossmann_jobs.synth.dataset_calendar import Calendar

WEATHER_COLUMNS = (
    "Max_TemperatureC", "Mean_TemperatureC", "Min_TemperatureC", "Dew_PointC", "MeanDew_PointC", "Min_DewpointC",
    "Max_Humidity", "Mean_Humidity", "Min_Humidity", "Max_Sea_Level_PressurehPa", "Mean_Sea_Level_PressurehPa",
    "Min_Sea_Level_PressurehPa", "Max_VisibilityKm", "Mean_VisibilityKm", "Min_VisibilitykM", "Max_Wind_SpeedKm_h",
    "Mean_Wind_SpeedKm_h", "Max_Gust_SpeedKm_h", "Precipitationmm", "CloudCover", "Events", "WindDirDegrees",
)
DECIMAL_COLUMNS = {"Precipitationmm": 2}   # all other numeric columns are whole numbers

# Event bits, in the order the real file joins them ("Fog-Rain-Snow-Hail-Thunderstorm").
FOG, RAIN, SNOW, HAIL, THUNDERSTORM = 1, 2, 4, 8, 16
EVENT_NAMES = ((FOG, "Fog"), (RAIN, "Rain"), (SNOW, "Snow"), (HAIL, "Hail"), (THUNDERSTORM, "Thunderstorm"))

# Events is blank on ~25% of days: dry days (30%) without fog (85% of them).
PRECIPITATION_SHARE, DRY_DAY_FOG = 0.70, 0.15
GUST_REPORTED_SHARE = 0.23     # Max_Gust_SpeedKm_h is blank on ~77% of days (only windy days report gusts)
CLOUD_COVER_MISSING = 0.07
VISIBILITY_MISSING = 0.024


@dataclass(frozen=True)
class Weather:
    """[day, state] arrays, states in STATE_NAMES order; NaN = blank; events as bit masks (0 = blank)."""

    values: dict[str, np.ndarray]
    events: np.ndarray


def event_label(mask: int) -> str:
    return "-".join(name for bit, name in EVENT_NAMES if mask & bit)


def _ar1(rng: np.random.Generator, shape: tuple[int, ...], phi: float, sd: float) -> np.ndarray:
    """Stationary AR(1) series along axis 0 with marginal standard deviation sd."""
    shocks = rng.normal(0.0, sd * np.sqrt(1 - phi**2), shape)
    series = np.empty(shape)
    series[0] = rng.normal(0.0, sd, shape[1:])
    for t in range(1, shape[0]):
        series[t] = phi * series[t - 1] + shocks[t]
    return series


def generate_weather(calendar: Calendar, num_states: int, rng: np.random.Generator) -> Weather:
    days, shape = calendar.num_days, (calendar.num_days, num_states)
    day_of_year = (calendar.dates - calendar.dates.astype("datetime64[Y]")).astype(int)
    season = -np.cos(2 * np.pi * (day_of_year - 20) / 365.25)[:, None]   # -1 mid-January .. +1 mid-July
    summer = np.clip(season, 0, 1)

    mean_temp = (9.5 + 9.5 * season + rng.normal(0, 0.8, num_states)[None, :]
                 + _ar1(rng, (days, 1), 0.85, 3.0) + _ar1(rng, shape, 0.7, 1.2))
    wet = 0.75 * _ar1(rng, (days, 1), 0.6, 1.0) + 0.66 * _ar1(rng, shape, 0.4, 1.0)  # ~N(0, 1)
    spread = np.clip(4.0 + 2.0 * summer - 1.2 * wet + rng.normal(0, 0.8, shape), 1.0, None)
    max_temp, min_temp = np.round(mean_temp + spread), np.round(mean_temp - spread)

    precipitating = wet > np.quantile(wet, 1 - PRECIPITATION_SHARE)
    snow = precipitating & (mean_temp < 1.5)
    rain = precipitating & (mean_temp > -1.0)
    humidity = np.clip(76 + 7 * wet - 0.7 * (mean_temp - 9.5) + rng.normal(0, 4, shape), 35, 99)
    calm = rng.random(shape)
    fog = rng.random(shape) < np.where(precipitating, 0.1 + 0.3 * (humidity > 82) * (calm < 0.6), DRY_DAY_FOG)
    thunder = rain & (rng.random(shape) < 0.22 * summer)
    hail = precipitating & (rng.random(shape) < 0.015)
    events = (FOG * fog + RAIN * rain + SNOW * snow + HAIL * hail + THUNDERSTORM * thunder).astype(np.int8)

    max_humidity = np.clip(humidity + rng.uniform(5, 16, shape), None, 100)
    min_humidity = np.clip(humidity - rng.uniform(10, 30, shape), 12, None)
    dew = mean_temp - (100 - humidity) / 5
    pressure = 1015 - 5 * wet + _ar1(rng, shape, 0.8, 4.0)
    mean_visibility = np.clip(np.round(16 - 4 * wet - 8 * fog + rng.normal(0, 3, shape)), 1, 31)
    visibility_missing = rng.random(shape) < VISIBILITY_MISSING
    mean_wind = np.clip(np.round(11 + 3 * np.abs(wet) + rng.gamma(2.0, 2.5, shape)), 2, 60)
    max_wind = mean_wind + np.round(rng.uniform(5, 18, shape))
    gust = max_wind + np.round(rng.uniform(8, 25, shape))
    windiness = max_wind + rng.normal(0, 4, shape)
    gust_reported = windiness >= np.quantile(windiness, 1 - GUST_REPORTED_SHARE)
    precipitation = np.where(precipitating, np.round(rng.gamma(0.8, 4.5, shape), 2), 0.0)
    cloud_cover = np.clip(np.round(4 + 2 * wet + rng.normal(0, 1.2, shape)), 0, 8)

    def blank_where(values: np.ndarray, missing: np.ndarray) -> np.ndarray:
        return np.where(missing, np.nan, values)

    values = {
        "Max_TemperatureC": max_temp,
        "Mean_TemperatureC": np.round(mean_temp),
        "Min_TemperatureC": min_temp,
        "Dew_PointC": np.round(dew + rng.uniform(1, 4, shape)),
        "MeanDew_PointC": np.round(dew),
        "Min_DewpointC": np.round(dew - rng.uniform(1, 5, shape)),
        "Max_Humidity": np.round(max_humidity),
        "Mean_Humidity": np.round(humidity),
        "Min_Humidity": np.round(min_humidity),
        "Max_Sea_Level_PressurehPa": np.round(pressure + rng.uniform(1, 6, shape)),
        "Mean_Sea_Level_PressurehPa": np.round(pressure),
        "Min_Sea_Level_PressurehPa": np.round(pressure - rng.uniform(1, 6, shape)),
        "Max_VisibilityKm": blank_where(np.where(mean_visibility > 10, 31.0, 10.0), visibility_missing),
        "Mean_VisibilityKm": blank_where(mean_visibility, visibility_missing),
        "Min_VisibilitykM": blank_where(np.clip(mean_visibility - np.round(rng.uniform(2, 10, shape)), 0, None),
                                        visibility_missing),
        "Max_Wind_SpeedKm_h": max_wind,
        "Mean_Wind_SpeedKm_h": mean_wind,
        "Max_Gust_SpeedKm_h": blank_where(gust, ~gust_reported),
        "Precipitationmm": precipitation,
        "CloudCover": blank_where(cloud_cover, rng.random(shape) < CLOUD_COVER_MISSING),
        "WindDirDegrees": np.round(rng.normal(230, 70, shape)) % 360,
    }
    return Weather(values=values, events=events)
