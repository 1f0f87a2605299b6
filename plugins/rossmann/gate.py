"""The champion/challenger quality gate: whether a newly trained model replaces the current champion (pure)."""
from __future__ import annotations

import math
from typing import Any


def promotion_threshold(champion_score: float, tolerance: float) -> float:
    """The worst validation exp_rmspe a challenger may have and still count as "not worse" than the champion."""
    return champion_score * (1.0 + tolerance)


def decide_promotion(candidate_score: float, champion: dict[str, Any] | None, tolerance: float) -> dict[str, Any]:
    """Promote when there is no usable champion or candidate <= champion * (1 + tolerance); lower exp_rmspe wins.

    A non-finite candidate score is never promoted; tolerance < 0 demands a relative improvement of at least -tolerance.
    """
    champion_score = None if champion is None else champion.get("val_exp_rmspe")
    if not math.isfinite(candidate_score):
        promoted, threshold, reason = False, None, f"candidate val exp_rmspe is {candidate_score}, not a finite number"
    elif champion_score is None or not math.isfinite(float(champion_score)):
        promoted, threshold, reason = True, None, "no champion with a finite score yet"
    else:
        threshold = promotion_threshold(float(champion_score), tolerance)
        promoted = candidate_score <= threshold
        relation = "<=" if promoted else ">"
        reason = (f"candidate {candidate_score:.5f} {relation} champion {float(champion_score):.5f} x "
                  f"(1 + {tolerance:g}) = {threshold:.5f}")
    return {
        "promoted": promoted,
        "candidate_val_exp_rmspe": candidate_score,
        "champion_val_exp_rmspe": None if champion_score is None else float(champion_score),
        "tolerance": tolerance,
        "threshold": threshold,
        "reason": reason,
    }
