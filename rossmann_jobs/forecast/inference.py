"""Vectorized inference: the model, loaded once per Python worker, applied to whole Arrow batches (mapInPandas)."""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from rossmann_jobs.features.spec import FEATURE_COLS
from rossmann_jobs.forecast.model_cache import load_model
from rossmann_jobs.model_store import ModelSource

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


def model_inputs(batch: pd.DataFrame, model) -> dict[str, np.ndarray]:
    """One (rows, 1) array per named model input, in the dtype the input was declared with."""
    return {name: batch[name].to_numpy().astype(tensor.dtype.as_numpy_dtype).reshape(-1, 1)
            for name, tensor in zip(model.input_names, model.inputs)}


def predict_log_sales(batch: pd.DataFrame, model) -> np.ndarray:
    if batch.empty:
        return np.empty(0, dtype=np.float32)
    return model(model_inputs(batch, model), training=False).numpy().reshape(-1).astype(np.float32)


def forecast_batches(model_uri: str, model_content: Callable[[], tuple[dict, bytes]], keep: list[str], threads: int
                     ) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The mapInPandas function: takes the model from the per-process cache, then one forward pass per batch."""
    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        model = load_model(model_uri, model_content, threads)
        for batch in batches:
            out = batch[keep].copy()
            out[LOG_FORECAST_COL] = predict_log_sales(batch, model)
            yield out
    return run


def with_log_forecast(df: DataFrame, model: BroadcastModel, keep: list[str], threads: int = 1) -> DataFrame:
    """df's `keep` columns plus LOG_FORECAST_COL (float32 log Sales) predicted by the model."""
    schema = T.StructType([df.schema[name] for name in keep]
                          + [T.StructField(LOG_FORECAST_COL, T.FloatType(), nullable=False)])
    columns = list(dict.fromkeys(keep + FEATURE_COLS))
    return df.select(*columns).mapInPandas(forecast_batches(model.uri, model.content, keep, threads), schema)
