"""Per-epoch training checkpoints under <out>/checkpoints/, each committed by a pointer object written last.

Layout: `epoch-<K>-<id>/` (weights.h5, optimizer.npz, state.json) holds the latest training state and
`best-<K>-<id>/weights.npz` the best model's weights so far (model/files.weights_bytes: plain arrays); `latest.json`
names both, relative to the checkpoint root. A single PUT (or local rename) is atomic, so a crash mid-write leaves
the previous pointer valid; the next checkpoint removes the orphaned folders.
"""
from __future__ import annotations

import io
import os
import tempfile
import uuid
from datetime import datetime, timezone
from typing import Any

import numpy as np

from rossmann_jobs import storage
from rossmann_jobs.model.files import weights_bytes
from rossmann_jobs.output_layout import MODEL_WEIGHTS_FILE

CHECKPOINT_DIR = "checkpoints"
POINTER_NAME = "latest.json"
WEIGHTS_FILE, OPTIMIZER_FILE, STATE_FILE = "weights.h5", "optimizer.npz", "state.json"
BEST_MODEL_FILE = MODEL_WEIGHTS_FILE


def checkpoint_root(out_uri: str) -> str:
    return storage.join(out_uri, CHECKPOINT_DIR)


def read_pointer(root: str) -> dict[str, Any] | None:
    pointer_uri = storage.join(root, POINTER_NAME)
    return storage.read_json(pointer_uri) if storage.exists(pointer_uri) else None


def read_state(root: str, pointer: dict[str, Any]) -> dict[str, Any]:
    return storage.read_json(storage.join(root, pointer["state_dir"], STATE_FILE))


def best_model_uri(root: str, pointer: dict[str, Any]) -> str:
    return storage.join(root, pointer["best_model"])


def save(root: str, epoch: int, model, optimizer, state: dict[str, Any], is_best: bool) -> dict[str, Any]:
    """Write the training state after `epoch` (and the model, if it is the best so far), then the pointer."""
    previous = read_pointer(root)
    tag = f"{epoch:04d}-{uuid.uuid4().hex[:8]}"
    state_dir = f"epoch-{tag}"
    prefix = storage.join(root, state_dir)
    with tempfile.TemporaryDirectory(prefix="rossmann-ckpt-") as tmp:
        weights_path = os.path.join(tmp, WEIGHTS_FILE)
        model.save_weights(weights_path)
        _upload_file(weights_path, storage.join(prefix, WEIGHTS_FILE))
        storage.write_bytes(storage.join(prefix, OPTIMIZER_FILE), optimizer_bytes(optimizer))
        storage.write_json(storage.join(prefix, STATE_FILE), state)
        if is_best or previous is None:
            best_model = f"best-{tag}/{BEST_MODEL_FILE}"
            storage.write_bytes(storage.join(root, best_model), weights_bytes(model))
        else:
            best_model = previous["best_model"]
    pointer = {"epoch": epoch, "state_dir": state_dir, "best_model": best_model,
               "written_at": datetime.now(timezone.utc).isoformat()}
    storage.write_json(storage.join(root, POINTER_NAME), pointer)
    _remove_unreferenced(root, keep={state_dir, best_model.split("/", 1)[0]})
    return pointer


def restore(root: str, pointer: dict[str, Any], model, optimizer) -> None:
    """Load weights and optimizer slots of the checkpoint into a freshly built model and optimizer."""
    prefix = storage.join(root, pointer["state_dir"])
    with tempfile.TemporaryDirectory(prefix="rossmann-ckpt-") as tmp:
        weights_path = os.path.join(tmp, WEIGHTS_FILE)
        with open(weights_path, "wb") as handle:
            handle.write(storage.read_bytes(storage.join(prefix, WEIGHTS_FILE)))
        model.load_weights(weights_path)
    restore_optimizer(optimizer, storage.read_bytes(storage.join(prefix, OPTIMIZER_FILE)))


def optimizer_bytes(optimizer) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **{f"{index:04d}|{var.name}": var.numpy() for index, var in enumerate(optimizer.weights)})
    return buffer.getvalue()


def restore_optimizer(optimizer, data: bytes) -> None:
    """Assign saved slot values in order; the optimizer's slots must exist (optimizer.make_optimizer)."""
    saved = np.load(io.BytesIO(data))
    variables = optimizer.weights
    if len(saved.files) != len(variables):
        raise ValueError(f"checkpoint has {len(saved.files)} optimizer variables, the optimizer {len(variables)}: "
                         "the model architecture changed; run with --no-resume to start over")
    for key, var in zip(sorted(saved.files), variables):
        value = saved[key]
        if tuple(value.shape) != tuple(var.shape):
            raise ValueError(f"optimizer variable {key} has shape {value.shape}, expected {tuple(var.shape)}")
        var.assign(value)


def _upload_file(local_path: str, uri: str) -> None:
    with open(local_path, "rb") as handle:
        storage.write_bytes(uri, handle.read())


def _remove_unreferenced(root: str, keep: set[str]) -> None:
    """Delete the folders under root that the pointer does not name (older epochs, orphans of crashed writes)."""
    base = root.rstrip("/") + "/"
    folders = {uri[len(base):].split("/", 1)[0] for uri in storage.list_files(root) if "/" in uri[len(base):]}
    for folder in folders - keep:
        storage.delete_prefix(storage.join(root, folder))
