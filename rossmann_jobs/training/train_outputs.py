"""The train job's outputs from the ranks' summary: model artifact description, metrics.json and the curve plot."""
from __future__ import annotations

import io
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


def training_curves_png(history: list[dict[str, Any]], best_epoch: int | None) -> bytes:
    """Loss and exp-RMSPE per epoch, train vs validation, with the best epoch marked."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    epochs = [entry["epoch"] for entry in history]
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for axis, metric, title in ((axes[0], "loss", "loss (MAE on log Sales + L2)"), (axes[1], "exp_rmspe", "exp-RMSPE")):
        axis.plot(epochs, [e[f"train_{metric}"] for e in history], marker="o", label="train")
        axis.plot(epochs, [e[f"val_{metric}"] for e in history], marker="o", label="validation")
        if best_epoch is not None:
            axis.axvline(best_epoch, color="grey", linestyle="--", label=f"best epoch {best_epoch}")
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()
