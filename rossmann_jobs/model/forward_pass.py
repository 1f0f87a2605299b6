"""The stored network's forward pass in numpy: forecasting and the gate run without TensorFlow; only training needs it.

A Python worker that imports TensorFlow and builds the Keras model spends about 5 CPU seconds and 0.5 GB before its
first row; this pass needs the model's arrays only (model/architecture.build_model's layers, by the names
model/files.weights_bytes stores them under), and computes what Keras computes at inference: each categorical
column's embedding row, the continuous columns through the batch normalization's moving statistics, the ReLU dense
layers, the dropout as identity, sigmoid(x) scaled by output_scale(max_sales). tests/jobs/test_forward_pass.py
checks it against the Keras model built from the same artifact.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rossmann_jobs.features.spec import CATEGORICAL_COLS, CONTINUOUS_COLS
from rossmann_jobs.model.architecture import output_scale
from rossmann_jobs.model.files import check_layer_shapes, read_weights
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.model.trust import IncompatibleModelError

BATCH_NORM_EPSILON = 1e-3   # Keras BatchNormalization's default, which build_model keeps


def expected_shapes(artifact: dict[str, Any]) -> dict[str, list[tuple[int, ...]]]:
    """{layer name: its arrays' shapes} of the network the artifact describes (as model/architecture.build_model)."""
    params = TrainParams.from_dict(artifact.get("params") or {})
    vocab_sizes, dim = artifact["vocab_sizes"], params.embedding_dim
    shapes = {f"emb_{col}": [(int(vocab_sizes[col]), dim)] for col in CATEGORICAL_COLS}
    shapes["continuous_bn"] = [(len(CONTINUOUS_COLS),)] * 4    # gamma, beta, moving mean, moving variance
    width = len(CATEGORICAL_COLS) * dim + len(CONTINUOUS_COLS)
    for index, units in enumerate(params.hidden_units):
        shapes[f"dense_{index}"] = [(width, units), (units,)]
        width = units
    shapes["sigmoid"] = [(width, 1), (1,)]
    return shapes


class ForwardPass:
    """The model an artifact and its weights.npz describe, as float32 numpy arrays; call it on a batch of rows."""

    def __init__(self, artifact: dict[str, Any], weights: bytes, uri: str):
        saved = read_weights(weights, uri)
        expected = expected_shapes(artifact)
        check_layer_shapes(saved, expected, uri)
        arrays = {name: [np.asarray(a, dtype=np.float32) for a in values] for name, values in saved.items()}
        self.uri = uri
        self.embeddings = [arrays[f"emb_{col}"][0] for col in CATEGORICAL_COLS]
        gamma, beta, mean, variance = arrays["continuous_bn"]
        # Inference-time batch normalization is one affine map per column.
        self.bn_scale = (gamma / np.sqrt(variance + np.float32(BATCH_NORM_EPSILON))).astype(np.float32)
        self.bn_shift = (beta - mean * self.bn_scale).astype(np.float32)
        self.dense = [tuple(arrays[name]) for name in expected if name.startswith("dense_")]   # in layer order
        self.output = tuple(arrays["sigmoid"])
        self.scale = np.float32(output_scale(float(artifact["max_sales"])))

    def __call__(self, batch: pd.DataFrame) -> np.ndarray:
        """float32 predicted log(Sales), one per row of batch (which holds every FEATURE_COLS column)."""
        parts = []
        for col, table in zip(CATEGORICAL_COLS, self.embeddings):
            index = batch[col].to_numpy().astype(np.int64)
            outside = (index < 0) | (index >= len(table))
            if outside.any():   # Keras fails on these too; numpy would wrap a negative index silently
                raise IncompatibleModelError(
                    f"{self.uri}: column {col} has indices outside the model's vocabulary of {len(table)} "
                    f"(e.g. {sorted(set(index[outside].tolist()))[:5]}); re-index the rows to its vocabularies first")
            parts.append(table[index])
        continuous = batch[list(CONTINUOUS_COLS)].to_numpy(dtype=np.float32)
        parts.append(continuous * self.bn_scale + self.bn_shift)
        x = np.concatenate(parts, axis=1)
        for kernel, bias in self.dense:
            x = np.maximum(x @ kernel + bias, np.float32(0))
        kernel, bias = self.output
        logits = (x @ kernel + bias).reshape(-1)
        return (self.scale / (np.float32(1) + np.exp(-logits))).astype(np.float32)
