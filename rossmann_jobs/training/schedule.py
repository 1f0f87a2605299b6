"""Learning-rate warm-up to the Horovod-scaled rate, then plateau cuts or a cosine decay, and early stopping.

The plateau rules follow the Keras callbacks the reference uses (LearningRateWarmupCallback, ReduceLROnPlateau,
EarlyStopping, all on val exp_rmspe). The cosine schedule decays the rate from the scaled peak to 0 over the epochs
after warm-up: with a fixed epoch budget it ends on a settled model instead of one that still jumps between epochs
at the full rate. Keeping the state as data lets a resumed run continue exactly where it stopped.
Every rank feeds the same allreduced metric, so all ranks take the same decisions without extra communication.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from rossmann_jobs.model.params import TrainParams


@dataclass(frozen=True)
class ScheduleState:
    lr_factor: float = 1.0                # product of plateau reductions so far
    plateau_best: float | None = None
    plateau_wait: int = 0
    best_epoch: int | None = None         # epoch with the lowest val exp_rmspe (the best model)
    best_value: float | None = None
    stop_wait: int = 0
    stopped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "ScheduleState":
        return cls(**values)


def learning_rate(params: TrainParams, size: int, epoch_progress: float, lr_factor: float) -> float:
    """Goyal et al. warm-up: ramp linearly from lr to lr * size over warmup_epochs; then hold it (times the plateau
    cuts, lr_schedule "plateau") or decay it along a half cosine to 0 at the last epoch ("cosine").

    epoch_progress counts completed epochs (0-based) plus the fraction of the current one.
    """
    warmup = min(params.warmup_epochs, params.epochs - 1) if params.lr_schedule == "cosine" else params.warmup_epochs
    if warmup > 0 and epoch_progress < warmup:
        return params.learning_rate * (1.0 + (size - 1) * epoch_progress / warmup) * lr_factor
    if params.lr_schedule == "cosine":
        done = min((epoch_progress - warmup) / max(params.epochs - warmup, 1), 1.0)
        return params.learning_rate * size * 0.5 * (1 + math.cos(math.pi * done))
    return params.learning_rate * size * lr_factor


def after_epoch(state: ScheduleState, epoch: int, val_metric: float,
                params: TrainParams) -> tuple[ScheduleState, list[str]]:
    """Update plateau / best / early-stop bookkeeping with this epoch's val metric; returns events to log."""
    events = []
    improved = state.best_value is None or val_metric < state.best_value
    best_epoch, best_value = (epoch, val_metric) if improved else (state.best_epoch, state.best_value)
    if improved:
        events.append(f"val exp_rmspe improved to {val_metric:.5f}: new best model")

    stop_wait = 0 if improved else state.stop_wait + 1
    stopped = stop_wait >= params.early_stopping_patience
    if stopped:
        events.append(f"early stopping: no improvement for {stop_wait} epochs (best epoch {best_epoch})")

    lr_factor = state.lr_factor
    if params.lr_schedule == "cosine":   # the decay is fixed in advance: no plateau cuts
        return ScheduleState(lr_factor, None, 0, best_epoch, best_value, stop_wait, stopped), events
    if state.plateau_best is None or val_metric < state.plateau_best - params.plateau_min_delta:
        plateau_best, plateau_wait = val_metric, 0
    else:
        plateau_best, plateau_wait = state.plateau_best, state.plateau_wait + 1
        if plateau_wait >= params.plateau_patience:
            lr_factor *= params.plateau_factor
            plateau_wait = 0
            events.append(f"plateau for {params.plateau_patience} epochs: learning rate x{params.plateau_factor}")

    return ScheduleState(lr_factor, plateau_best, plateau_wait, best_epoch, best_value, stop_wait, stopped), events
