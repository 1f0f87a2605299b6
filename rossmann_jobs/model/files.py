"""A stored model is data, never code: artifact.json (the params this code builds it from) + weights.npz.

Keras 2.15 has no safe mode for whole-model files: loading a planted HDF5 model runs its Lambda layers' code. So
no model is ever deserialized: this code computes the network the artifact's params, vocabulary sizes and max_sales
describe (model/forward_pass.py) from plain arrays read with numpy's allow_pickle=False. Before that, the
model's location and the SHA-256 of each of its files are checked (model/store.open_model, model/trust.py); an
earlier release's whole-model model/model.h5 is refused by its artifact's missing `model_format`, never opened.
"""
from __future__ import annotations

import io
import json
from typing import Any

from rossmann_jobs import storage
from rossmann_jobs.model.trust import IncompatibleModelError, sha256_hex
from rossmann_jobs.output_layout import ARTIFACT_FILE, LEGACY_MODEL_FILE, MODEL_DIR, MODEL_WEIGHTS_FILE

MODEL_FORMAT = "rossmann-mlp-params+weights-npz/1"
ARTIFACT_PATH, WEIGHTS_PATH = f"{MODEL_DIR}/{ARTIFACT_FILE}", f"{MODEL_DIR}/{MODEL_WEIGHTS_FILE}"


def artifact_bytes(artifact: dict[str, Any]) -> bytes:
    """The exact bytes written for artifact.json (the digest covers these)."""
    return json.dumps(artifact, indent=2, sort_keys=True).encode("utf-8")


def check_format(artifact: Any, attempt: str) -> None:
    if not isinstance(artifact, dict) or artifact.get("model_format") != MODEL_FORMAT:
        found = artifact.get("model_format") if isinstance(artifact, dict) else type(artifact).__name__
        raise IncompatibleModelError(
            f"model {attempt} is not a {MODEL_FORMAT!r} model ({ARTIFACT_PATH} model_format: {found!r}). Models "
            f"stored whole ({MODEL_DIR}/{LEGACY_MODEL_FILE}, by releases before this one) are never loaded: Keras "
            "would deserialize code from them. Not loaded; a newly trained model replaces it.")


def write_model(attempt: str, artifact: dict[str, Any], weights: bytes) -> dict[str, str]:
    """Write model/artifact.json (with model_format) and model/weights.npz; returns their SHA-256 digests."""
    artifact_data = artifact_bytes({**artifact, "model_format": MODEL_FORMAT, "model_file": MODEL_WEIGHTS_FILE})
    storage.write_bytes(storage.join(attempt, WEIGHTS_PATH), weights)
    storage.write_bytes(storage.join(attempt, ARTIFACT_PATH), artifact_data)
    return {ARTIFACT_PATH: sha256_hex(artifact_data), WEIGHTS_PATH: sha256_hex(weights)}


def weights_bytes(model) -> bytes:
    """Every layer's weights as plain arrays, keyed `<layer name>/<index>` (np.savez: no pickled objects)."""
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **{f"{layer.name}/{index:02d}": value for layer in model.layers
                        for index, value in enumerate(layer.get_weights())})
    return buffer.getvalue()


def read_weights(data: bytes, uri: str) -> dict[str, list]:
    """{layer name: its arrays in order} from weights_bytes' content; object arrays (pickles) are refused."""
    import numpy as np

    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as saved:
            arrays = {key: saved[key] for key in saved.files}
    except ValueError as error:   # numpy's "Object arrays cannot be loaded when allow_pickle=False", bad zips
        raise IncompatibleModelError(f"{uri}: not a weights file of plain arrays ({error}). Not loaded.") from None
    layers: dict[str, list] = {}
    for key in sorted(arrays):
        name, _, index = key.rpartition("/")
        layers.setdefault(name, []).append(arrays[key])
    return layers


def check_layer_shapes(saved: dict[str, list], expected: dict[str, list[tuple[int, ...]]], uri: str) -> None:
    """Refuse weights whose layers or array shapes differ from those of the network the artifact describes."""
    if set(saved) != set(expected):
        raise IncompatibleModelError(f"{uri}: its weights name layers {sorted(saved)}, the model built from its "
                                     f"artifact has {sorted(expected)}. Not loaded.")
    for name, shapes in expected.items():
        if [tuple(a.shape) for a in saved[name]] != shapes:
            raise IncompatibleModelError(f"{uri}: layer {name} weights have shapes "
                                         f"{[a.shape for a in saved[name]]}, expected {shapes}. Not loaded.")
