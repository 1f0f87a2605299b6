"""Named generator settings (SynthConfig overrides), so forecasts are scored on a matrix of data sets, not one."""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from rossmann_jobs.synth.dataset import SynthConfig


@dataclass(frozen=True)
class Scenario:
    description: str
    overrides: dict = field(default_factory=dict)   # SynthConfig keyword arguments


SCENARIOS: dict[str, Scenario] = {
    "baseline": Scenario("all defaults: the data set as generated before the knobs existed"),
    "growth": Scenario("stores grow or decline 3x faster (yearly log-growth sd 0.12)", {"growth_scale": 3.0}),
    "shifts": Scenario("30% of stores shift level permanently in the last 120 train days",
                       {"shift_share": 0.3, "shift_size": 0.2}),
    "weather-strong": Scenario("weather effect 2.5x as strong in log terms", {"weather_scale": 2.5}),
    "no-weather-trend": Scenario("neither weather nor Google trend moves sales",
                                 {"weather_scale": 0.0, "trend_scale": 0.0}),
    "noisy": Scenario("twice the irreducible noise (sigma 0.2)", {"sigma": 0.2}),
    "mixed": Scenario("faster growth, some level shifts, stronger trend and more noise at once",
                      {"growth_scale": 2.0, "shift_share": 0.15, "trend_scale": 1.5, "sigma": 0.15}),
}
SCENARIO_NAMES = tuple(SCENARIOS)
# stores and seed are the matrix's other axes, set per run, never by a scenario.
_OVERRIDABLE = {f.name for f in fields(SynthConfig)} - {"stores", "seed"}


def scenario_overrides(name: str) -> dict:
    """The SynthConfig keyword overrides of a named scenario; ValueError naming the known ones otherwise."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIO_NAMES)}")
    overrides = dict(SCENARIOS[name].overrides)
    unknown = set(overrides) - _OVERRIDABLE
    if unknown:
        raise ValueError(f"scenario {name!r} sets {sorted(unknown)}, not a generator setting")
    return overrides


def scenario_config(name: str, stores: int, seed: int) -> SynthConfig:
    """The validated SynthConfig of a named scenario at the given size and seed."""
    config = SynthConfig(stores=stores, seed=seed, **scenario_overrides(name))
    config.validate()
    return config
