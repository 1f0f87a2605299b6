"""The champion/challenger quality gate: whether a newly trained model replaces the current champion (pure)."""
from __future__ import annotations

import math
from typing import Any


def promotion_threshold(champion_score: float, tolerance: float) -> float:
    """The worst validation exp_rmspe a challenger may have and still count as "not worse" than the champion."""
    return champion_score * (1.0 + tolerance)


def decide_promotion(candidate_score: float, champion: dict[str, Any] | None, tolerance: float, *,
                     run_id: str | None = None, model_attempt_uri: str | None = None) -> dict[str, Any]:
    """Promote when there is no usable champion or candidate <= champion * (1 + tolerance); lower exp_rmspe wins.

    A non-finite candidate score is never promoted; tolerance < 0 demands a relative improvement of at least -tolerance.
    Re-runs never churn the champion: the committed model attempt that already is champion is kept as is, and a
    re-run of the champion's own run (same data, same params) must be strictly better to replace it.
    """
    champion_score = None if champion is None else champion.get("val_exp_rmspe")
    threshold = None
    if not math.isfinite(candidate_score):
        promoted, reason = False, f"candidate val exp_rmspe is {candidate_score}, not a finite number"
    elif champion_score is None or not math.isfinite(float(champion_score)):
        promoted, reason = True, "no champion with a finite score yet"
    elif model_attempt_uri is not None and champion.get("source_model_uri") == model_attempt_uri:
        promoted, reason = False, f"this committed model ({model_attempt_uri}) already is the champion"
    else:
        threshold = promotion_threshold(float(champion_score), tolerance)
        promoted = candidate_score <= threshold
        relation = "<=" if promoted else ">"
        reason = (f"candidate {candidate_score:.5f} {relation} champion {float(champion_score):.5f} x "
                  f"(1 + {tolerance:g}) = {threshold:.5f}")
        if run_id is not None and champion.get("run_id") == run_id:
            strictly_better = candidate_score < float(champion_score)
            promoted = promoted and strictly_better
            reason += (f"; a re-run of the champion's run {run_id} must also be strictly better: "
                       f"it is{'' if strictly_better else ' not'}")
    return {
        "promoted": promoted,
        "candidate_val_exp_rmspe": candidate_score,
        "champion_val_exp_rmspe": None if champion_score is None else float(champion_score),
        "tolerance": tolerance,
        "threshold": threshold,
        "reason": reason,
    }
