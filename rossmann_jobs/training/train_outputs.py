"""The train job's outputs from the ranks' summary: model artifact description and metrics.json (its curve plot:
reporting/training_curves.py)."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from rossmann_jobs.features.spec import CATEGORICAL_COLS, CONTINUOUS_COLS, FEATURE_COLS, LABEL_COL
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.training.feature_set import FeatureSet


def artifact_description(features: FeatureSet, summary: dict[str, Any], params: TrainParams) -> dict[str, Any]:
    """model/artifact.json: everything predict needs besides the weights to build the model (params, vocab_sizes,
    max_sales) and turn prepared rows into Sales. model/files.write_model adds its format and weights file."""
    return {
        "feature_order": FEATURE_COLS,
        "categorical": CATEGORICAL_COLS,
        "continuous": CONTINUOUS_COLS,
        "input_dtypes": {**{col: "int32" for col in CATEGORICAL_COLS}, **{col: "float32" for col in CONTINUOUS_COLS}},
        "vocab_sizes": features.vocab_sizes,
        "vocabularies": features.metadata.get("vocabularies", {}),
        "max_sales": features.max_sales,
        "label": LABEL_COL,
        "label_transform": "log",
        "output": "log(Sales); Sales = exp(output)",
        "features_uri": features.features_uri,
        "features_attempt": features.attempt_uri,
        "trained_at": datetime.now(timezone.utc).isoformat(),
        "horovod_size": summary["horovod_size"],
        "best_epoch": summary["best_epoch"],
        "best_val_exp_rmspe": summary["best_val_exp_rmspe"],
        "params": params.to_dict(),
    }


def metrics_document(summary: dict[str, Any], params: TrainParams, num_proc: int,
                     timings: dict[str, float]) -> dict[str, Any]:
    """metrics.json: per-epoch curves plus what shows the run was data-parallel and how fast it was."""
    history = summary["history"]
    return {
        "epochs": history,
        "best_epoch": summary["best_epoch"],
        "best_val_exp_rmspe": summary["best_val_exp_rmspe"],
        "epochs_run": len(history),
        "stopped_early": summary["stopped_early"],
        "resumed_after_epoch": summary["resumed_after_epoch"],
        "horovod_size": summary["horovod_size"],
        "num_proc_requested": num_proc,
        "ranks": summary["ranks"],
        "train_rows_total": summary["train_rows_total"],
        "validation_rows_total": summary["validation_rows_total"],
        "steps_per_epoch": summary["steps_per_epoch"],
        "mean_samples_per_second": _mean([e["samples_per_second"] for e in history]),
        "mean_data_wait_share": _mean([e["data_wait_share"] for e in history]),
        "params": params.to_dict(),
        "timings_seconds": timings,
    }


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None

