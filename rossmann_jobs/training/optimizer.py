"""The optimizer the train job fits the network with (model/architecture.py)."""
from __future__ import annotations

from rossmann_jobs.model.params import TrainParams


def make_optimizer(params: TrainParams, variables):
    """The reference's Adam (epsilon 1e-3), with its slots created for `variables` before the first step.

    The legacy Keras optimizer: its fused Adam kernels train faster here than the TF 2.11+ optimizer (see
    bench/RESULTS.md "## Train job"), and creating the slots up front lets rank 0 restore and broadcast them.
    """
    import tensorflow as tf

    optimizer = tf.keras.optimizers.legacy.Adam(learning_rate=params.learning_rate, epsilon=params.adam_epsilon)
    optimizer._create_all_weights(variables)  # Keras 2 has no public "build" for legacy optimizers
    return optimizer
