"""Per-epoch training checkpoints under <out>/checkpoints/, each committed by a pointer object written last.

Layout: `epoch-<K>-<id>/` (weights.npz, optimizer.npz, state.json) holds the latest training state and
`best-<K>-<id>/weights.npz` the best model's weights so far; `latest.json` names both, relative to the checkpoint
root, with the SHA-256 of every file. Weights are plain arrays like a model's (model/files.weights_bytes, read with
allow_pickle=False), never a Keras HDF5 file; a pointer whose paths are not the two folder shapes above, or a file
whose bytes are not the pointer's, is refused (CheckpointError), so whoever can write `runs/` cannot make a resumed
run read another object or its own planted bytes. A single PUT (or local rename) is atomic, so a crash mid-write
leaves the previous pointer valid; the next checkpoint removes the orphaned folders.
"""
from __future__ import annotations

import io
import json
import re
import uuid
from datetime import datetime, timezone
from typing import Any

import numpy as np

from rossmann_jobs import storage
from rossmann_jobs.model.files import read_weights, weights_bytes
from rossmann_jobs.model.trust import sha256_hex
from rossmann_jobs.output_layout import MODEL_WEIGHTS_FILE

CHECKPOINT_DIR = "checkpoints"
POINTER_NAME = "latest.json"
WEIGHTS_FILE, OPTIMIZER_FILE, STATE_FILE = MODEL_WEIGHTS_FILE, "optimizer.npz", "state.json"
BEST_MODEL_FILE = MODEL_WEIGHTS_FILE
DIGESTS = "sha256"   # the pointer's {path relative to the root: SHA-256} of every file it names
_STATE_DIR = re.compile(r"epoch-\d{4,}-[0-9a-f]{8}")
_BEST_MODEL = re.compile(rf"best-\d{{4,}}-[0-9a-f]{{8}}/{re.escape(BEST_MODEL_FILE)}")


class CheckpointError(ValueError):
    """A checkpoint that is not one this code wrote: an older format, paths of another shape, or changed bytes."""


def checkpoint_root(out_uri: str) -> str:
    return storage.join(out_uri, CHECKPOINT_DIR)


def read_pointer(root: str) -> dict[str, Any] | None:
    pointer_uri = storage.join(root, POINTER_NAME)
    return storage.read_json(pointer_uri) if storage.exists(pointer_uri) else None


def check_pointer(pointer: Any) -> None:
    """Refuse a pointer whose paths could name anything but this checkpoint's own folders, or that has no digests."""
    if not isinstance(pointer, dict) or not isinstance(pointer.get(DIGESTS), dict):
        raise CheckpointError("the checkpoint pointer has no file digests (written by an earlier release)")
    state_dir, best_model = pointer.get("state_dir"), pointer.get("best_model")
    if not isinstance(state_dir, str) or not _STATE_DIR.fullmatch(state_dir):
        raise CheckpointError(f"the checkpoint pointer's state_dir {state_dir!r} is not an epoch folder")
    if not isinstance(best_model, str) or not _BEST_MODEL.fullmatch(best_model):
        raise CheckpointError(f"the checkpoint pointer's best_model {best_model!r} is not a best-model file")


def read_verified(root: str, pointer: dict[str, Any], relative: str) -> bytes:
    """A file the pointer names, after checking its bytes against the pointer's digest."""
    check_pointer(pointer)
    expected = pointer[DIGESTS].get(relative)
    data = storage.read_bytes(storage.join(root, relative))
    if expected is None or sha256_hex(data) != expected:
        raise CheckpointError(f"checkpoint file {relative} under {root} does not match the pointer's SHA-256")
    return data


def read_state(root: str, pointer: dict[str, Any]) -> dict[str, Any]:
    return json.loads(read_verified(root, pointer, f"{pointer['state_dir']}/{STATE_FILE}"))


def best_model_uri(root: str, pointer: dict[str, Any]) -> str:
    check_pointer(pointer)
    return storage.join(root, pointer["best_model"])


def read_best_model(root: str, pointer: dict[str, Any]) -> bytes:
    """The best model's weights (plain arrays), checked against the pointer's digest."""
    return read_verified(root, pointer, pointer["best_model"])


def save(root: str, epoch: int, model, optimizer, state: dict[str, Any], is_best: bool) -> dict[str, Any]:
    """Write the training state after `epoch` (and the model, if it is the best so far), then the pointer."""
    previous = read_pointer(root)
    if previous is not None:
        try:
            check_pointer(previous)
        except CheckpointError:
            previous = None   # not ours: this checkpoint starts a new best model
    tag = f"{epoch:04d}-{uuid.uuid4().hex[:8]}"
    state_dir = f"epoch-{tag}"
    files = {f"{state_dir}/{WEIGHTS_FILE}": weights_bytes(model),
             f"{state_dir}/{OPTIMIZER_FILE}": optimizer_bytes(optimizer),
             f"{state_dir}/{STATE_FILE}": json.dumps(state, indent=2, sort_keys=True).encode("utf-8")}
    if is_best or previous is None:
        best_model = f"best-{tag}/{BEST_MODEL_FILE}"
        files[best_model] = files[f"{state_dir}/{WEIGHTS_FILE}"]
        best_digest = None
    else:
        best_model, best_digest = previous["best_model"], previous[DIGESTS][previous["best_model"]]
    for relative, data in files.items():
        storage.write_bytes(storage.join(root, relative), data)
    digests = {relative: sha256_hex(data) for relative, data in files.items()}
    if best_digest is not None:
        digests[best_model] = best_digest
    pointer = {"epoch": epoch, "state_dir": state_dir, "best_model": best_model, DIGESTS: digests,
               "written_at": datetime.now(timezone.utc).isoformat()}
    storage.write_json(storage.join(root, POINTER_NAME), pointer)
    _remove_unreferenced(root, keep={state_dir, best_model.split("/", 1)[0]})
    return pointer


def restore(root: str, pointer: dict[str, Any], model, optimizer) -> None:
    """Load weights and optimizer slots of the checkpoint into a freshly built model and optimizer."""
    prefix = pointer["state_dir"]
    saved = read_weights(read_verified(root, pointer, f"{prefix}/{WEIGHTS_FILE}"), f"{root}/{prefix}")
    for layer in model.layers:
        if layer.weights:
            if layer.name not in saved:
                raise CheckpointError(f"checkpoint {root}/{prefix} has no weights for layer {layer.name}")
            layer.set_weights(saved[layer.name])
    restore_optimizer(optimizer, read_verified(root, pointer, f"{prefix}/{OPTIMIZER_FILE}"))


def optimizer_bytes(optimizer) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **{f"{index:04d}|{var.name}": var.numpy() for index, var in enumerate(optimizer.weights)})
    return buffer.getvalue()


def restore_optimizer(optimizer, data: bytes) -> None:
    """Assign saved slot values in order; the optimizer's slots must exist (optimizer.make_optimizer)."""
    saved = np.load(io.BytesIO(data), allow_pickle=False)
    variables = optimizer.weights
    if len(saved.files) != len(variables):
        raise ValueError(f"checkpoint has {len(saved.files)} optimizer variables, the optimizer {len(variables)}: "
                         "the model architecture changed; run with --no-resume to start over")
    for key, var in zip(sorted(saved.files), variables):
        value = saved[key]
        if tuple(value.shape) != tuple(var.shape):
            raise ValueError(f"optimizer variable {key} has shape {value.shape}, expected {tuple(var.shape)}")
        var.assign(value)


def _remove_unreferenced(root: str, keep: set[str]) -> None:
    """Delete the folders under root that the pointer does not name (older epochs, orphans of crashed writes)."""
    base = root.rstrip("/") + "/"
    folders = {uri[len(base):].split("/", 1)[0] for uri in storage.list_files(root) if "/" in uri[len(base):]}
    for folder in folders - keep:
        storage.delete_prefix(storage.join(root, folder))
