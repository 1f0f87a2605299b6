"""The network: the reference entity-embedding MLP for log(Sales) in stock Keras layers (build_model), which
training fits; forward_pass.py computes the same network in numpy for forecasting, with output_scale from here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from rossmann_jobs.features.spec import CATEGORICAL_COLS, CONTINUOUS_COLS, FEATURE_COLS
from rossmann_jobs.model.params import TrainParams


def output_scale(max_sales: float) -> float:
    """Upper bound of the predicted log(Sales): log(max_sales) * 1.2, as in the reference."""
    if not max_sales or max_sales <= 1:
        raise ValueError(f"max_sales must be the largest raw Sales value (> 1), got {max_sales!r}")
    return math.log(max_sales) * 1.2


@dataclass(frozen=True)
class TrainStatistics:
    """Train-split statistics an untrained model starts from (splits.train_statistics computes them)."""
    mean_log_sales: float
    continuous_mean: tuple[float, ...]       # per CONTINUOUS_COLS column
    continuous_variance: tuple[float, ...]


def output_bias(initial_log_sales: float | None, max_sales: float) -> float:
    """The output unit's bias that makes sigmoid(bias) * output_scale equal initial_log_sales (0 when None).

    Bias 0 starts every prediction at output_scale / 2 (about log(Sales) 6 where Sales are ~e^8.7), and the first
    steps would only chase that constant offset; starting at the mean, they learn the differences between rows.
    """
    if initial_log_sales is None:
        return 0.0
    share = min(max(initial_log_sales / output_scale(max_sales), 1e-3), 1 - 1e-3)
    return math.log(share / (1 - share))


def build_model(vocab_sizes: Mapping[str, int], max_sales: float, params: TrainParams,
                start: TrainStatistics | None = None):
    """One Input per FEATURE_COLS column (named as the column, shape (1,)), output: predicted log(Sales).

    The reference's custom activation sigmoid(x) * log(max_sales) * 1.2 is Dense(sigmoid) followed by a constant
    Rescaling (stock layers only). A stored model is rebuilt by this function from its artifact's params and given
its weights (rossmann_jobs/model/files.py): never deserialized.
    With `start`, the untrained model predicts about the train split's mean log(Sales) (output_bias), and the
    continuous batch normalization's moving statistics start at the split's mean and variance instead of 0 and 1:
    those are what evaluation uses, and at momentum 0.99 a short run (tens of steps) would otherwise evaluate
    raw-scale inputs (distances in metres) that training never saw.
    """
    import tensorflow as tf

    layers = tf.keras.layers
    inputs = {col: layers.Input(shape=(1,), name=col, dtype="int32") for col in CATEGORICAL_COLS}
    inputs.update({col: layers.Input(shape=(1,), name=col, dtype="float32") for col in CONTINUOUS_COLS})

    embeddings = [layers.Embedding(vocab_sizes[col], params.embedding_dim, name=f"emb_{col}")(inputs[col])
                  for col in CATEGORICAL_COLS]
    continuous = layers.Concatenate(name="continuous")(
        [layers.Reshape((1, 1), name=f"reshape_{col}")(inputs[col]) for col in CONTINUOUS_COLS])
    moving = {} if start is None else {
        "moving_mean_initializer": tf.keras.initializers.Constant(list(start.continuous_mean)),
        "moving_variance_initializer": tf.keras.initializers.Constant(list(start.continuous_variance))}
    continuous = layers.BatchNormalization(name="continuous_bn", **moving)(continuous)
    x = layers.Flatten(name="flatten")(layers.Concatenate(name="all_features")(embeddings + [continuous]))
    for index, units in enumerate(params.hidden_units):
        x = layers.Dense(units, activation="relu", kernel_regularizer=tf.keras.regularizers.l2(params.l2),
                         name=f"dense_{index}")(x)
    x = layers.Dropout(params.dropout, name="dropout")(x)
    x = layers.Dense(1, activation="sigmoid", name="sigmoid",
                     bias_initializer=tf.keras.initializers.Constant(
                         output_bias(None if start is None else start.mean_log_sales, max_sales)))(x)
    log_sales = layers.Rescaling(output_scale(max_sales), name="log_sales")(x)
    return tf.keras.Model([inputs[col] for col in FEATURE_COLS], log_sales, name="rossmann_mlp")

