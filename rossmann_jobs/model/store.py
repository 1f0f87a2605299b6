"""The model store: a model URI (a committed train output, an attempt, the gate's pinned champion copy) resolved
to one shape, ModelSource (the attempt holding model/, its checked artifact.json and recorded digests).

Every job that uses a stored model opens it here (predict, the gate's champion score, warm start): the location
(model/trust.check_model_location), the format (model/files.check_format) and the artifact's SHA-256 are checked
before anything of it is used; the weights are checked again when read (ModelSource.weights_bytes).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rossmann_jobs import storage
from rossmann_jobs.features.spec import FEATURE_COLS
from rossmann_jobs.model.files import ARTIFACT_PATH, WEIGHTS_PATH, check_format
from rossmann_jobs.model.trust import DIGESTS_KEY, check_digest, check_model_location, decode_digests
from rossmann_jobs.output_layout import TRAIN_METRICS_FILE


@dataclass(frozen=True)
class ModelSource:
    """A model attempt whose artifact was read and checked; its weights are checked when read (weights_bytes)."""
    uri: str                     # as given (train output, attempt, or pinned champion copy)
    attempt: str                 # the attempt holding model/
    artifact: dict[str, Any]
    digests: dict[str, str]      # recorded SHA-256 per MODEL_FILES entry

    def weights_bytes(self) -> bytes:
        data = storage.read_bytes(storage.join(self.attempt, WEIGHTS_PATH))
        check_digest(self.attempt, WEIGHTS_PATH, data, self.digests)
        return data

    def training_metrics(self) -> dict[str, Any] | None:
        """The attempt's metrics.json (None for a model attempt written without one)."""
        uri = storage.join(self.attempt, TRAIN_METRICS_FILE)
        return storage.read_json(uri) if storage.exists(uri) else None

    def feature_mismatch(self) -> str:
        """Why this code cannot feed the model its rows ("" when it can): it was trained on other feature columns."""
        same = self.artifact.get("feature_order") == FEATURE_COLS
        return "" if same else "its feature columns differ from this code's"


def attempt_of(model_uri: str) -> tuple[str, dict[str, str]]:
    """(the attempt holding model/, the digests its train job recorded, if any). An output prefix resolves through
    its manifest; an attempt or pinned champion copy (model/artifact.json) is taken as is."""
    if storage.exists(storage.join(model_uri, storage.MANIFEST_NAME)):
        summary = storage.read_manifest(model_uri).get("summary") or {}
        return storage.committed_uri(model_uri), decode_digests(summary.get(DIGESTS_KEY))
    if storage.exists(storage.join(model_uri, ARTIFACT_PATH)):
        return model_uri.rstrip("/"), {}
    raise storage.OutputNotCommittedError(
        f"model {model_uri} is neither a committed train output (no {storage.MANIFEST_NAME}) nor a model attempt "
        f"(no {ARTIFACT_PATH}): run the train task, or pass the champion's model_uri from champion.json.")


def open_model(model_uri: str, digests: str | dict | None = None, root: str | None = None) -> ModelSource:
    """The model at model_uri, checked before anything of it is used: its location (under the storage root's
    models/ or runs/), its format, and its artifact's SHA-256 against `digests` (the champion record's), else
    against those its train job committed. Raises a ModelRefusedError (IncompatibleModelError for the format)."""
    check_model_location(model_uri, root)
    attempt, committed = attempt_of(model_uri)
    data = storage.read_bytes(storage.join(attempt, ARTIFACT_PATH))
    try:
        artifact = json.loads(data)
    except ValueError:
        artifact = None
    check_format(artifact, attempt)   # before the digests: an earlier release's champion has none, and is refused
    expected = decode_digests(digests) or committed
    check_digest(attempt, ARTIFACT_PATH, data, expected)
    return ModelSource(uri=model_uri, attempt=attempt, artifact=artifact, digests=expected)
