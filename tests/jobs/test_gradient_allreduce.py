"""The train step's one allreduce of all the gradients averages them as Horovod's per-variable tape does (2 ranks)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

MODES = ("job", "per_variable", "no_allreduce")


def _one_step_per_mode() -> dict[str, list]:
    """In each Horovod rank: for each mode, the same initial model takes one step on this rank's own rows."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from rossmann_jobs.features.spec import FEATURE_COLS, LABEL_COL
    from rossmann_jobs.model.architecture import build_model
    from rossmann_jobs.model.params import TrainParams
    from rossmann_jobs.training.optimizer import make_optimizer
    from rossmann_jobs.training.worker import _make_steps
    from testkit.feature_fixtures import VOCAB_SIZES, feature_table
    from testkit.horovod_steps import NoAllreduce, per_variable_train_step

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    params = TrainParams(hidden_units=(16, 8), embedding_dim=3, dropout=0.0)   # no dropout: one exact step
    table = feature_table(64, np.random.default_rng(100 + hvd.rank()))   # each rank its own rows
    features = [table[col].to_numpy().reshape(-1, 1) for col in FEATURE_COLS]
    labels = table[LABEL_COL].to_numpy().reshape(-1, 1)

    results = {}
    for mode in MODES:   # no_allreduce: each rank steps on its own gradients, the control
        tf.keras.utils.set_random_seed(7)   # the same initial weights in every rank and mode
        model = build_model(VOCAB_SIZES, 20000.0, params)
        optimizer = make_optimizer(params, model.trainable_variables)
        if mode == "per_variable":
            step = per_variable_train_step(tf, hvd, model, optimizer)
        else:
            step = _make_steps(tf, hvd if mode == "job" else NoAllreduce(), model, optimizer, params)[0]
        initial = [variable.numpy() for variable in model.trainable_variables]
        step(features, labels)
        # The trainable weights; the batch norm's moving statistics follow each rank's own rows until the job
        # averages them after the epoch.
        results[mode] = {"initial": initial, "after": [variable.numpy() for variable in model.trainable_variables]}
    return results


@pytest.fixture(scope="module")
def ranks():
    import horovod

    with pytest.MonkeyPatch.context() as patch:   # the ranks import this module and the checkout as pytest does
        patch.setenv("PYTHONPATH", os.pathsep.join(path for path in sys.path if path))
        return horovod.run(_one_step_per_mode, num_proc=2, use_gloo=True, network_interfaces=["lo"])


def _same(a, b) -> bool:
    return all(np.allclose(x, y, rtol=1e-6, atol=1e-7) for x, y in zip(a, b, strict=True))


def test_one_allreduce_of_all_gradients_equals_the_per_variable_average(ranks):
    for rank in ranks:
        assert not _same(rank["job"]["initial"], rank["job"]["after"])   # the step moved the weights
        assert _same(rank["job"]["after"], rank["per_variable"]["after"])
    assert _same(ranks[0]["job"]["after"], ranks[1]["job"]["after"])   # both ranks hold the same model


def test_the_comparison_fails_for_ranks_that_step_on_their_own_gradients(ranks):
    # The control: without the allreduce, the ranks' rows give each rank other weights, and neither rank's
    # weights are the averaged step's.
    assert not _same(ranks[0]["no_allreduce"]["after"], ranks[1]["no_allreduce"]["after"])
    assert not _same(ranks[0]["no_allreduce"]["after"], ranks[0]["job"]["after"])
