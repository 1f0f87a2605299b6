"""The training curves: loss and exp-RMSPE per epoch, train vs validation, as the PNG the train job writes beside its
metrics.json (training_curves.png), which the forecast page embeds as it is."""
from __future__ import annotations

from typing import Any

from matplotlib.ticker import MaxNLocator

from rossmann_jobs.reporting.html import plt, png_bytes


def training_curves_png(history: list[dict[str, Any]], best_epoch: int | None) -> bytes:
    """Loss and exp-RMSPE per epoch, train vs validation, with the best epoch marked."""
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
    return png_bytes(figure)
