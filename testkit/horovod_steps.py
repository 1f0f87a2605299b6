"""The train step before one allreduce of all the gradients, as a baseline: each gradient allreduced alone.

hvd.DistributedGradientTape, as the train job ran it before (docs/decisions.md)."""
from __future__ import annotations


def per_variable_train_step(tf, hvd, model, optimizer):
    """One step with each variable's gradient allreduced on its own (sparse_as_dense), no metric sums."""
    @tf.function
    def train_step(features, labels):
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            loss = tf.reduce_mean(tf.abs(labels - predictions)) + tf.add_n(model.losses)
        tape = hvd.DistributedGradientTape(tape, sparse_as_dense=True)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return train_step


class NoAllreduce:
    """Stands in for horovod.tensorflow in a train step without communication: each process keeps its own gradients
    (the compute alone, or a control whose ranks must end up apart)."""

    Average = None

    @staticmethod
    def allreduce(tensor, **_):
        return tensor

    @staticmethod
    def DistributedGradientTape(tape, **_):   # noqa: N802 (Horovod's name)
        return tape
