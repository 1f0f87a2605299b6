"""The forecast metrics, each defined once: exp-RMSPE, the pinball (quantile) loss and P10-P90 interval coverage.

Each row formula is written once, on operands with arithmetic (numpy arrays, pandas Series, Spark Columns), and thin
adapters aggregate it: Spark Columns for the jobs (predict's validation score, the gate, the score job), numpy for
the generator's truth scores and the bench scripts. Training sums exp-RMSPE in its TensorFlow graph.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from pyspark.sql import Column

# The reference metric ignores rows whose log(Sales) is ~0 (Sales <= 1) to avoid dividing by ~nothing.
RMSPE_MIN_LOG_SALES = 0.001


# Row formulas: numpy arrays, pandas Series or Spark Columns alike.

def squared_percentage_error(actual, forecast):
    """((y - y_hat) / y)^2 of each row: the term exp-RMSPE averages over the rows with y > 0."""
    return ((actual - forecast) / actual) ** 2


def pinball_loss(actual, quantile, level, maximum=np.maximum):
    """The quantile (pinball) loss of each row: level x (y - q) when y >= q, (1 - level) x (q - y) below.
    `maximum`: the element-wise maximum of the operands' kind (np.maximum; F.greatest for Spark Columns)."""
    error = actual - quantile
    return maximum(level * error, (level - 1) * error)


def in_interval(actual, low, high):
    """Whether each row's actual lies in [low, high]."""
    return (actual >= low) & (actual <= high)


# numpy: scores of rows in memory (the generator's truth scores, the bench scripts).

def exp_rmspe(actual: np.ndarray, predicted: np.ndarray) -> float:
    """sqrt(mean(((y - y_hat) / y)^2)) over the rows with y > 0 (the competition metric); NaN if none."""
    actual, predicted = np.asarray(actual, dtype=float), np.asarray(predicted, dtype=float)
    positive = actual > 0
    if not positive.any():
        return float("nan")
    return float(np.sqrt(np.mean(squared_percentage_error(actual[positive], predicted[positive]))))


def coverage(actual, low, high) -> float:
    """The share of rows whose actual lies in [low, high]."""
    return float(np.mean(in_interval(actual, low, high)))


def quantile_loss(actual: np.ndarray, quantiles: np.ndarray, levels: Sequence[float]) -> float:
    """Amazon Forecast's wQL averaged over the levels: per level (quantiles[:, i]) 2 sum(pinball) / sum(actual)."""
    pinball = pinball_loss(actual[:, None], quantiles, np.asarray(levels, float)[None, :])
    return float(np.mean(2 * pinball.sum(axis=0) / actual.sum()))


# Spark: aggregate Columns over a group of rows (the same row formulas; a Spark aggregate is no numpy reduction).

def rmspe(actual: str, forecast: str) -> Column:
    """sqrt(mean(((y - y_hat) / y)^2)) over rows with y > 0 (rows with y = 0 contribute nothing, as on Kaggle)."""
    from pyspark.sql import functions as F

    squared = F.when(F.col(actual) > 0, squared_percentage_error(F.col(actual), F.col(forecast)))
    return F.sqrt(F.avg(squared))


def interval_coverage(actual: str, low: str, high: str) -> Column:
    """The share of rows whose actual lies in [low, high]."""
    from pyspark.sql import functions as F

    return F.avg(in_interval(F.col(actual), F.col(low), F.col(high)).cast("double"))


def weighted_quantile_loss(actual: str, quantiles: list[str], levels: tuple[float, ...]) -> Column:
    """Amazon Forecast's wQL averaged over the levels: per level 2 sum(pinball) / sum(actual)."""
    from pyspark.sql import functions as F

    losses = [2 * F.sum(pinball_loss(F.col(actual), F.col(name), level, F.greatest)) / F.sum(actual)
              for name, level in zip(quantiles, levels)]
    total = losses[0]
    for loss in losses[1:]:
        total = total + loss
    return total / len(losses)


# TensorFlow: training's exact per-rank sums, allreduced across ranks.

def exp_rmspe_sums_tf(log_true, log_pred):
    """(sum of squared percentage errors, number of rows counted) in TF, so ranks can allreduce exact totals."""
    import tensorflow as tf

    log_true = tf.reshape(tf.cast(log_true, tf.float32), [-1])
    log_pred = tf.reshape(tf.cast(log_pred, tf.float32), [-1])
    counted = log_true > RMSPE_MIN_LOG_SALES
    # Its own form of squared_percentage_error, on log values in float32: (exp(y) - exp(p)) / exp(y) == 1 - exp(p - y),
    # which cannot overflow for large Sales.
    squared = tf.square(1.0 - tf.exp(log_pred - log_true))
    return (tf.reduce_sum(tf.where(counted, squared, tf.zeros_like(squared))),
            tf.reduce_sum(tf.cast(counted, tf.float32)))


def rmspe_from_sums(squared_sum: float, count: float) -> float:
    return math.sqrt(squared_sum / count) if count > 0 else float("nan")
