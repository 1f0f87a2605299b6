"""Vectorized inference: the model's numpy forward pass, built once per Python worker, applied to whole Arrow
batches (mapInPandas)."""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from rossmann_jobs.features.spec import FEATURE_COLS
from rossmann_jobs.model.cache import load_model
from rossmann_jobs.model.forward_pass import ForwardPass
from rossmann_jobs.model.store import ModelSource

LOG_FORECAST_COL = "LogSalesForecast"


class BroadcastModel:
    """The model's artifact and weights, read and checked once on the driver (whose credentials reach the store:
    ModelSource.weights_bytes verifies the SHA-256) and broadcast to executors, which build the model from them."""

    def __init__(self, spark, source: ModelSource):
        self.uri = source.attempt
        self._broadcast = spark.sparkContext.broadcast((source.artifact, source.weights_bytes()))

    def content(self) -> tuple[dict, bytes]:
        return self._broadcast.value

    def destroy(self) -> None:
        self._broadcast.destroy()


def predict_log_sales(batch: pd.DataFrame, model: ForwardPass) -> np.ndarray:
    if batch.empty:
        return np.empty(0, dtype=np.float32)
    return model(batch)


def forecast_batches(model_uri: str, model_content: Callable[[], tuple[dict, bytes]], keep: list[str]
                     ) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The mapInPandas function: takes the model from the per-process cache, then one forward pass per batch."""
    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        model = load_model(model_uri, model_content)
        for batch in batches:
            out = batch[keep].copy()
            out[LOG_FORECAST_COL] = predict_log_sales(batch, model)
            yield out
    return run


def with_model_log_forecast(df: DataFrame, model: BroadcastModel, keep: list[str]) -> DataFrame:
    """df's `keep` columns plus LOG_FORECAST_COL (float32 log Sales) predicted by the model on the executors."""
    schema = T.StructType([df.schema[name] for name in keep]
                          + [T.StructField(LOG_FORECAST_COL, T.FloatType(), nullable=False)])
    columns = list(dict.fromkeys(keep + FEATURE_COLS))
    return df.select(*columns).mapInPandas(forecast_batches(model.uri, model.content, keep), schema)
