"""Deterministic synthetic Rossmann data: the 7 files of rossmann.tgz, with their quirks, from a documented model.

Expected (noise-free) sales of store s on day d, 0 when the store is closed:

    mu = store level x day of week x season (month, Christmas rush, payday) x promo (incl. the dips before/after
         a promo) x state holiday (rush before, rebound after) x school holiday x competition (distance, ramp over
         the months it is open) x Promo2 (weeks running, promo months) x weather (heat, cold, events)
         x Google trend (state, Germany) x per-store yearly trend

    Sales = round(mu * exp(eps)),  eps ~ N(0, sigma^2)  (--sigma, default 0.1)

Knobs (SynthConfig, CLI flags) scale the per-store growth, weather and trend effects and add permanent level
shifts; synth/scenarios.py names settings of them (SCENARIOS) for scoring forecasts on a matrix of data sets.

The truth file (beside the raw folder, <out>.truth.json) holds the exact exp-RMSPE of the oracle prediction mu
against the written Sales. Details and the constants: README.md in this package and rossmann_jobs/synth/sales.py.
"""
from rossmann_jobs.synth.dataset import RAW_FILES, SynthConfig, SynthDataset, build_dataset
from rossmann_jobs.synth.dataset_calendar import HORIZON_DAYS
from rossmann_jobs.synth.drops import DailyDrops, check_drop_date, forecast_horizon
from rossmann_jobs.synth.scenarios import SCENARIO_NAMES, SCENARIOS, Scenario, scenario_config

__all__ = ["HORIZON_DAYS", "RAW_FILES", "SCENARIOS", "SCENARIO_NAMES", "DailyDrops", "Scenario", "SynthConfig",
           "SynthDataset", "build_dataset", "check_drop_date", "forecast_horizon", "scenario_config"]
