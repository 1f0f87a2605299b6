"""Warm start: a new model begins from an earlier model's weights, embedding rows re-indexed to today's vocabularies.

The driver plans it (plan_warm_start): the earlier model must be in this code's format (model/files.py: params +
weights, never a whole Keras model), have the same architecture (hidden units, embedding width) and feature columns,
else the run starts cold and says why; one outside the allowed prefixes or unlike its recorded SHA-256 fails the
run. Each categorical value keeps the embedding row it had in the earlier model; a value that model never saw gets
the fresh (random) row of the new model, and the "unknown" row 0 carries over. Rank 0 reads the weights (plain
arrays, checked against the recorded SHA-256 again: it reads them after the driver did) before they are broadcast
to every rank.
Optimizer slots and the learning-rate schedule start fresh: a warm start is a fine-tune, not a resumed run.
Point in time: the DAG passes the champion as of D (trained on data <= D), so a warm start never sees the future.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rossmann_jobs.features.spec import CATEGORICAL_COLS, UNKNOWN_INDEX
from rossmann_jobs.model.files import read_weights
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.model.store import ModelSource, open_model
from rossmann_jobs.model.trust import IncompatibleModelError
from rossmann_jobs.training.feature_set import FeatureSet

log = logging.getLogger("rossmann.train")

FRESH_ROW = -1   # embedding_rows entry: a value the earlier model never saw keeps the new model's initial row


@dataclass(frozen=True)
class WarmStart:
    source_model: str                     # the model (train output or attempt) as given
    source: ModelSource                   # its checked artifact and recorded digests
    embedding_rows: dict[str, list[int]]  # per categorical column: new index -> earlier model's row (FRESH_ROW: none)
    max_sales_ratio: float                # new max_sales / earlier max_sales (the output layer's scale follows it)

    def fresh_rows(self) -> dict[str, int]:
        return {column: rows.count(FRESH_ROW) for column, rows in self.embedding_rows.items() if FRESH_ROW in rows}

    def describe(self) -> dict[str, Any]:
        return {"source_model": self.source_model, "model_attempt": self.source.attempt,
                "fresh_embedding_rows": self.fresh_rows(), "max_sales_ratio": self.max_sales_ratio}


def embedding_rows(new_values: list[Any], old_values: list[Any]) -> list[int]:
    """For index 0..n of the new vocabulary, the row of the same value in the old one (0 for unknown)."""
    old_row = {value: position + 1 for position, value in enumerate(old_values)}
    return [UNKNOWN_INDEX] + [old_row.get(value, FRESH_ROW) for value in new_values]


def plan_warm_start(model_uri: str, features: FeatureSet, params: TrainParams,
                    model_sha256: str = "") -> tuple[WarmStart | None, str]:
    """(plan, "") or (None, why the model cannot seed this run). model_uri: a committed train output or attempt,
    model_sha256 its recorded digests (model/trust.encode_digests; empty: those its train job committed)."""
    try:
        source = open_model(model_uri, model_sha256)
    except IncompatibleModelError as error:
        return None, str(error)
    artifact = source.artifact
    earlier = TrainParams.from_dict(artifact.get("params", {}))
    if earlier.architecture() != params.architecture():
        return None, f"its architecture {earlier.architecture()} differs from this run's {params.architecture()}"
    if source.feature_mismatch():
        return None, source.feature_mismatch()
    vocabularies, old_vocabularies = features.metadata["vocabularies"], artifact.get("vocabularies", {})
    missing = [column for column in CATEGORICAL_COLS if column not in old_vocabularies]
    if missing:
        return None, f"its artifact has no vocabulary for {missing}"
    rows = {column: embedding_rows(vocabularies[column], old_vocabularies[column]) for column in CATEGORICAL_COLS}
    return WarmStart(source_model=model_uri, source=source,
                     embedding_rows=rows, max_sales_ratio=features.max_sales / float(artifact["max_sales"])), ""


def load_weights(model, warm: WarmStart) -> None:
    """Copy the earlier model's weights (plain arrays) into `model` (built for today's vocabularies), layer by
    layer by name."""
    earlier = read_weights(warm.source.weights_bytes(), warm.source.attempt)
    for layer in model.layers:
        if not layer.weights:
            continue
        if layer.name not in earlier:
            raise IncompatibleModelError(f"{warm.source.attempt}: its weights have no layer {layer.name}")
        source = earlier[layer.name]
        if layer.name.startswith("emb_"):
            table = layer.get_weights()[0]
            for index, row in enumerate(warm.embedding_rows[layer.name[len("emb_"):]]):
                if row != FRESH_ROW:
                    table[index] = source[0][row]
            layer.set_weights([table])
        else:
            layer.set_weights(source)
    log.info("warm start from %s: fresh embedding rows for unseen values %s", warm.source_model,
             warm.fresh_rows() or "none")
