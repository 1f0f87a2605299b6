"""The numpy forward pass forecasts what the Keras network built from the same artifact forecasts, without TF."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from rossmann_jobs.features.spec import CATEGORICAL_COLS, FEATURE_COLS
from rossmann_jobs.model import files as model_files
from rossmann_jobs.model.forward_pass import ForwardPass
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.model.trust import IncompatibleModelError
from testkit.feature_fixtures import VOCAB_SIZES, feature_table

PARAMS = TrainParams(hidden_units=(32, 16, 8), embedding_dim=4)
MAX_SALES = 30000.0


@pytest.fixture(scope="module")
def trained_like():
    """(artifact, weights.npz bytes, Keras model): every array random, the batch normalization's moving statistics
    and scale included, so no layer of the pass is checked at an identity."""
    import tensorflow as tf

    from rossmann_jobs.model.architecture import build_model

    tf.keras.utils.set_random_seed(3)
    model = build_model(VOCAB_SIZES, MAX_SALES, PARAMS)
    rng = np.random.default_rng(5)
    for layer in model.layers:
        values = layer.get_weights()
        if layer.name == "continuous_bn":
            gamma, beta, mean, variance = (v.shape for v in values)
            values = [rng.uniform(0.5, 2, gamma), rng.normal(0, 0.5, beta), rng.normal(0, 100, mean),
                      rng.uniform(1, 1e4, variance)]
        elif values:
            values = [v + rng.normal(0, 0.2, v.shape) for v in values]
        layer.set_weights([np.asarray(v, dtype=np.float32) for v in values])
    # Centre the output unit on the rows' median: random weights can put every row on the sigmoid's flat tail,
    # where rows no longer differ and a wrong layer would not show.
    output = model.get_layer("sigmoid")
    hidden = tf.keras.Model(model.inputs, output.input)
    rows = feature_table(500, np.random.default_rng(7)).to_pandas()
    kernel, bias = output.get_weights()
    before = hidden.predict({c: rows[c].to_numpy().reshape(-1, 1) for c in FEATURE_COLS}, verbose=0) @ kernel + bias
    output.set_weights([kernel, bias - np.median(before)])
    artifact = {"vocab_sizes": VOCAB_SIZES, "max_sales": MAX_SALES, "params": PARAMS.to_dict()}
    return artifact, model_files.weights_bytes(model), model


def test_forecasts_what_keras_forecasts(trained_like):
    artifact, weights, model = trained_like
    rows = feature_table(2000, np.random.default_rng(11)).to_pandas()
    expected = model.predict({c: rows[c].to_numpy().reshape(-1, 1) for c in FEATURE_COLS}, verbose=0).reshape(-1)
    forecast = ForwardPass(artifact, weights, "file:///m")(rows)
    assert forecast.dtype == np.float32 and forecast.shape == (2000,)
    assert np.ptp(expected) > 0.5   # not a saturated model: rows differ, so a wrong layer would show
    np.testing.assert_allclose(forecast, expected, rtol=2e-5, atol=2e-5)


def test_a_wrong_layer_would_be_seen(trained_like):
    """The comparison above can fail: skipping the batch normalization changes the forecast."""
    artifact, weights, model = trained_like
    rows = feature_table(200, np.random.default_rng(12)).to_pandas()
    expected = model.predict({c: rows[c].to_numpy().reshape(-1, 1) for c in FEATURE_COLS}, verbose=0).reshape(-1)
    broken = ForwardPass(artifact, weights, "file:///m")
    broken.bn_scale, broken.bn_shift = np.ones_like(broken.bn_scale), np.zeros_like(broken.bn_shift)
    assert np.max(np.abs(broken(rows) - expected)) > 1e-2


def test_indices_outside_the_vocabulary_are_refused_not_wrapped(trained_like):
    artifact, weights, _ = trained_like
    rows = feature_table(20, np.random.default_rng(13)).to_pandas()
    column = CATEGORICAL_COLS[0]
    for bad in (-1, VOCAB_SIZES[column]):
        rows.loc[3, column] = bad
        with pytest.raises(IncompatibleModelError, match=f"column {column} has indices outside"):
            ForwardPass(artifact, weights, "file:///m")(rows)


def test_weights_of_another_shape_are_refused(trained_like):
    artifact, weights, _ = trained_like
    wider = {**artifact, "params": {**PARAMS.to_dict(), "hidden_units": [64, 16, 8]}}
    with pytest.raises(IncompatibleModelError, match="layer dense_0 weights have shapes"):
        ForwardPass(wider, weights, "file:///m")


def test_forecasting_imports_no_tensorflow():
    """What a predict or gate Python worker imports to forecast: TensorFlow is not among it."""
    code = ("import sys; import rossmann_jobs.forecast.inference, rossmann_jobs.model.cache, "
            "rossmann_jobs.predict, rossmann_jobs.gate_scores; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'horovod')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
