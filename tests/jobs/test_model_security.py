"""Models are data, never code: a planted model never runs, a tampered one is refused, only allowed prefixes load.

Each place a job reads a model (predict, warm start, the gate's champion score) is given a model planted the way an
attacker with write access to the bucket would: the earlier releases' whole-model model/model.h5 whose Lambda layer
writes a marker file when Keras builds it, with its real SHA-256 recorded (so only the format rule stands between
it and the job). The marker must never appear; each test's negative control loads the same file as the old code did
(tf.keras.models.load_model) and shows the marker does appear, so the plant is real.
"""
from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

import predict_fixtures
from rossmann_jobs import storage
from rossmann_jobs.model import files as model_files
from rossmann_jobs.model import store as model_store
from rossmann_jobs.model.forward_pass import ForwardPass
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.model.trust import (
    IncompatibleModelError,
    UntrustedModelError,
    check_model_location,
    encode_digests,
    sha256_hex,
)


def plant_lambda_model(attempt: str, marker: str) -> str:
    """An earlier-release model attempt (model/model.h5 + artifact.json, no model_format) whose Lambda layer writes
    `marker` when the model is built; returns the SHA-256 digests of its files as a champion record would hold."""
    import tensorflow as tf

    # The path travels as a default argument: Keras stores a Lambda's code, defaults and closure in the HDF5 file.
    def payload(x, path=marker):
        import pathlib

        pathlib.Path(path).write_text("code from the bucket ran")
        return x

    inputs = [tf.keras.layers.Input(shape=(1,), name=column) for column in predict_fixtures.FEATURE_COLS]
    planted = tf.keras.layers.Lambda(payload, name="planted")(tf.keras.layers.Concatenate()(inputs))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(planted))
    if os.path.exists(marker):   # building it here ran the payload once: start clean
        os.remove(marker)
    local = os.path.join(os.path.dirname(marker), "planted.h5")
    model.save(local, save_format="h5")
    with open(local, "rb") as handle:
        h5 = handle.read()
    artifact = json.dumps({**predict_fixtures.model_artifact(predict_fixtures.vocabularies()),
                           "model_file": "model.h5"}).encode()
    storage.write_bytes(storage.join(attempt, "model", "model.h5"), h5)
    storage.write_bytes(storage.join(attempt, "model", "artifact.json"), artifact)
    return encode_digests({"model/artifact.json": sha256_hex(artifact)})


def old_code_runs_it(attempt: str, marker: str) -> bool:
    """What the loaders did before: tf.keras.models.load_model on the .h5 (the negative control)."""
    import tensorflow as tf

    local = os.path.join(os.path.dirname(marker), "as-the-old-code-read-it.h5")
    with open(local, "wb") as handle:
        handle.write(storage.read_bytes(storage.join(attempt, "model", "model.h5")))
    tf.keras.models.load_model(local, compile=False)
    return os.path.exists(marker)


@pytest.fixture()
def planted(storage_root, tmp_path):
    marker = str(tmp_path / "MARKER")
    attempt = storage.join(storage_root, "models", "champions", "2015-07-30", "run", "a-planted")
    return {"attempt": attempt, "marker": marker, "digests": plant_lambda_model(attempt, marker)}


def test_predict_refuses_a_planted_model_without_running_it(planted, spark, tmp_path):
    from rossmann_jobs import predict

    with pytest.raises(IncompatibleModelError, match=rf"model {planted['attempt']} is not a .*model/model\.h5.*"
                                                     r"never loaded"):
        predict.run_predict(spark, planted["attempt"], str(tmp_path / "features"), str(tmp_path / "out"),
                            raw_uri=str(tmp_path / "raw"), model_sha256=planted["digests"])
    assert not os.path.exists(planted["marker"])
    assert not storage.exists(str(tmp_path / "out" / storage.MANIFEST_NAME))
    assert old_code_runs_it(planted["attempt"], planted["marker"])


def test_warm_start_from_a_planted_model_starts_cold_without_running_it(planted):
    from rossmann_jobs.training.warm_start import plan_warm_start

    plan, reason = plan_warm_start(planted["attempt"], None, TrainParams(), planted["digests"])
    assert plan is None and "never loaded" in reason and planted["attempt"] in reason
    assert not os.path.exists(planted["marker"])
    assert old_code_runs_it(planted["attempt"], planted["marker"])


def test_the_gate_scores_no_planted_champion_and_runs_none_of_it(planted):
    from rossmann_jobs.gate_scores import champion_forecast

    rows, model, facts = champion_forecast("rows", None, None, planted["attempt"], planted["digests"])
    assert rows == "rows" and model is None   # not scored: the challenger only has to beat the baseline
    assert "never loaded" in facts["champion_incompatible"] and facts["champion_model_uri"] == planted["attempt"]
    assert not os.path.exists(planted["marker"])
    assert old_code_runs_it(planted["attempt"], planted["marker"])


class _Payload:
    """An object array element: unpickling it writes the marker (what np.load(allow_pickle=True) would do)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (_write_marker, (self.marker,))


def _write_marker(path: str) -> None:
    with open(path, "w") as handle:
        handle.write("unpickled")


def test_weights_holding_a_pickle_are_refused_without_unpickling(tmp_path):
    marker = str(tmp_path / "MARKER")
    buffer = io.BytesIO()
    np.savez(buffer, **{"dense_0/00": np.array([_Payload(marker)], dtype=object)})
    with pytest.raises(IncompatibleModelError, match="not a weights file of plain arrays"):
        model_files.read_weights(buffer.getvalue(), "s3://b/runs/x/model/weights.npz")
    assert not os.path.exists(marker)
    np.load(io.BytesIO(buffer.getvalue()), allow_pickle=True)["dense_0/00"]   # negative control
    assert os.path.exists(marker)


# --- digests ----------------------------------------------------------------------------------------------------

@pytest.fixture()
def committed(storage_root):
    out = storage.join(storage_root, "runs", "2015-07-31", "run", "model")
    model = predict_fixtures.build_model(predict_fixtures.vocabularies())
    digests = predict_fixtures.write_model(out, model=model)
    return {"out": out, "attempt": storage.committed_uri(out), "digests": digests, "model": model}


def test_a_model_is_rebuilt_from_its_params_and_weights_and_predicts_the_same(committed):
    source = model_store.open_model(committed["out"])   # the digests its train job committed
    rebuilt = ForwardPass(source.artifact, source.weights_bytes(), source.attempt)   # what predict and the gate load
    frames, _ = predict_fixtures.make_frames()
    inputs = {c: frames[c].to_numpy().reshape(-1, 1) for c in predict_fixtures.FEATURE_COLS}
    np.testing.assert_allclose(rebuilt(frames), committed["model"].predict(inputs, verbose=0).reshape(-1),
                               rtol=1e-6)


@pytest.mark.parametrize("tampered", ["model/weights.npz", "model/artifact.json"])
def test_a_tampered_file_is_refused(committed, tampered):
    uri = storage.join(committed["attempt"], tampered)
    original = storage.read_bytes(uri)
    if tampered.endswith(".npz"):
        weights = model_files.read_weights(original, uri)
        weights["sigmoid"][1] = weights["sigmoid"][1] + 5.0   # every forecast e^(5 x 1.2 ...) times off
        buffer = io.BytesIO()
        np.savez(buffer, **{f"{name}/{i:02d}": a for name, arrays in weights.items() for i, a in enumerate(arrays)})
        forged = buffer.getvalue()
    else:
        forged = original.replace(b'"max_sales": 20000.0', b'"max_sales": 90000.0')
    assert forged != original
    storage.write_bytes(uri, forged)
    recorded = encode_digests(committed["digests"])
    with pytest.raises(UntrustedModelError, match=rf"{tampered}: SHA-256 .* differs from the recorded"):
        model_store.open_model(committed["attempt"], recorded).weights_bytes()
    # Negative control: without the digest check the forged files would load and serve.
    source = model_store.ModelSource(committed["attempt"], committed["attempt"],
                                     json.loads(storage.read_bytes(storage.join(committed["attempt"],
                                                                                "model/artifact.json"))), {})
    ForwardPass(source.artifact, storage.read_bytes(storage.join(committed["attempt"], "model/weights.npz")), uri)


def test_a_model_without_recorded_digests_is_refused(committed):
    pinned = committed["attempt"]   # an attempt (like a pinned champion copy) has no manifest of its own
    with pytest.raises(UntrustedModelError, match="no SHA-256 recorded"):
        model_store.open_model(pinned)
    assert model_store.open_model(pinned, encode_digests(committed["digests"])).attempt == pinned


# --- location ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("uri, allowed", [
    ("s3://rossmann/models/champions/2015-07-31/r/a", True),
    ("s3a://rossmann/runs/2015-07-31/r/model", True),
    ("s3://rossmann/raw/2015-07-31/model", False),           # the lander's prefix
    ("s3://rossmann/modelsx/a", False),
    ("s3://other-bucket/models/a", False),
    ("s3://rossmann/runs/../raw/a", False),
    ("/tmp/rossmann/models/a", False),                        # a local path is not the bucket
])
def test_only_the_buckets_models_and_runs_prefixes_are_allowed(uri, allowed, monkeypatch):
    monkeypatch.delenv("ROSSMANN_STORAGE_ROOT", raising=False)
    monkeypatch.setenv("ROSSMANN_BUCKET", "rossmann")
    if allowed:
        check_model_location(uri)
    else:
        with pytest.raises(UntrustedModelError, match="lies outside"):
            check_model_location(uri)


def test_a_local_root_is_checked_the_same_way(storage_root, tmp_path):
    check_model_location(str(tmp_path / "runs" / "x" / "model"))
    check_model_location(f"file://{tmp_path}/models/champions/a")
    for outside in (tmp_path / "raw" / "m", tmp_path / "runs" / ".." / "raw" / "m", tmp_path.parent / "runs" / "m"):
        with pytest.raises(UntrustedModelError, match="lies outside"):
            check_model_location(str(outside))


def test_predict_refuses_a_model_outside_the_allowed_prefixes(storage_root, spark, tmp_path):
    from rossmann_jobs import predict

    elsewhere = str(tmp_path / "raw" / "2015-07-31" / "model")
    predict_fixtures.write_model(elsewhere)   # a well-formed model, in the lander's prefix
    with pytest.raises(UntrustedModelError, match=rf"model {elsewhere} lies outside"):
        predict.run_predict(spark, elsewhere, str(tmp_path / "features"), str(tmp_path / "out"),
                            raw_uri=str(tmp_path / "raw"))
