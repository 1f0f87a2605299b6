"""The day's log forecast from the model (model/broadcast.py) or, when no model may forecast the date, from the
naive seasonal baseline in its place."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rossmann_jobs.forecast.baseline import BASELINE_COL
from rossmann_jobs.model.broadcast import LOG_FORECAST_COL, BroadcastModel, with_model_log_forecast
from rossmann_jobs.output_layout import NAIVE_FORECAST_MODEL


class SeasonalNaive:
    """The naive seasonal baseline (forecast/baseline.py) in a model's place: the day's fallback forecast when no
    model may forecast the date. Its forecast is the rows' BASELINE_COL, which the caller has fitted on rows dated
    before the ones forecast."""
    uri = NAIVE_FORECAST_MODEL

    def destroy(self) -> None:
        pass


def with_log_forecast(df: DataFrame, model: BroadcastModel | SeasonalNaive, keep: list[str]) -> DataFrame:
    """df's `keep` columns plus LOG_FORECAST_COL (float32 log Sales) predicted by the model."""
    if isinstance(model, SeasonalNaive):
        return df.select(*keep, F.log(F.col(BASELINE_COL)).cast("float").alias(LOG_FORECAST_COL))
    return with_model_log_forecast(df, model, keep)
