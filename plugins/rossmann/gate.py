"""The champion/challenger quality gate: which champion serves an as-of date; does a new model replace it (pure)."""
from __future__ import annotations

import math
from typing import Any, Iterable

from rossmann.uris import record_as_of


class ScoredChampionError(RuntimeError):
    """The champion as of the run's date is not the model the train job scored on its validation rows."""


def champion_record_as_of(record_uris: Iterable[str], as_of: str) -> str | None:
    """The history record with the greatest as-of date <= as_of (YYYY-MM-DD); None if there is none.

    A champion promoted for a later date never serves an earlier one: it was trained on data the earlier date
    could not have seen. Objects not named like a record are ignored.
    """
    dated = [(day, uri) for uri in record_uris if (day := record_as_of(uri)) is not None and day <= as_of]
    return max(dated)[1] if dated else None


def promotion_threshold(champion_score: float, tolerance: float) -> float:
    """The worst exp_rmspe a challenger may have and still count as "not worse" than the champion."""
    return champion_score * (1.0 + tolerance)


def _finite(score: Any) -> bool:
    return score is not None and math.isfinite(float(score))


def _fmt(score: Any) -> str:
    return f"{float(score):.5f}" if _finite(score) else str(score)


def season_verdict(season: dict[str, Any] | None, tolerance: float = 0.0) -> dict[str, Any]:
    """Whether the network may forecast the date's season: its recipe, replayed a year earlier (the train job's
    --season-backtest: trained on the rows up to D - 364 - 48, scored on D - 364 .. D - 316 with the naive seasonal
    baseline fitted up to D - 364), beats the baseline there; with a positive tolerance, is below baseline x (1 +
    tolerance). A backtest that could not run (too short a history) or recorded no finite scores passes, saying
    so: the recent window is then the only evidence, as before the backtest existed."""
    if not season or not season.get("available"):
        why = (season or {}).get("reason") or "no calendar-matched backtest was run"
        return {"passed": True, "available": False, "reason": f"no calendar-matched backtest ({why})"}
    challenger, baseline = season.get("challenger"), season.get("baseline")
    window = f"{season.get('window_start')} .. {season.get('window_end')}"
    facts = {"available": True, "challenger": challenger, "baseline": baseline, "tolerance": tolerance,
             "origin": season.get("origin"), "window_start": season.get("window_start"),
             "window_end": season.get("window_end"), "rows": season.get("scored_rows")}
    if not (_finite(challenger) and _finite(baseline)):
        return {**facts, "passed": True,
                "reason": f"the calendar-matched backtest on {window} scored challenger {challenger} and naive "
                          f"{baseline}: no comparison"}
    passed = float(challenger) < float(baseline) * (1.0 + tolerance)
    allowance = f" x (1 + {tolerance:g})" if tolerance else ""
    verdict = "beats" if passed else "loses to"
    return {**facts, "passed": passed,
            "reason": f"calendar-matched backtest (the recipe a year earlier, {window}): {_fmt(challenger)} vs naive "
                      f"{_fmt(baseline)}{allowance}: the network {verdict} the naive baseline in this season"}


def decide_promotion(scores: dict[str, Any], champion: dict[str, Any] | None, tolerance: float, *,
                     baseline_tolerance: float = 0.0, run_id: str | None = None,
                     model_attempt_uri: str | None = None, season: dict[str, Any] | None = None,
                     season_tolerance: float = 0.0) -> dict[str, Any]:
    """Promote iff the challenger is finite, strictly better than the naive baseline (or, with a positive
    baseline_tolerance, below baseline x (1 + baseline_tolerance)), and there is no champion or
    challenger <= champion x (1 + tolerance); every score is exp_rmspe on the train job's same validation rows.

    `scores` is the train job's metrics.json `gate_scores` (challenger, champion, baseline, validation_rows,
    champion_model_uri); `champion` the champion record as of the run's date (None: there is none). A score
    measured on other rows (the champion record's own val_exp_rmspe) is never used. Re-runs never churn the
    champion: the committed model attempt that already is champion is kept as is, and a re-run of the champion's
    own run (same data, same params) must be strictly better to replace it. Raises ScoredChampionError when a
    comparison with the champion is needed but the train job scored another model (or none). `season`: the
    calendar-matched backtest's facts (season_verdict); a network that loses to the baseline there is not promoted,
    and the decision's season_backtest["passed"] says no network forecasts the date.
    """
    challenger, baseline, champion_score = scores.get("challenger"), scores.get("baseline"), scores.get("champion")
    rows = f"on the same {scores.get('validation_rows')} validation rows"
    versus_baseline = f"challenger {_fmt(challenger)} vs naive seasonal baseline {_fmt(baseline)}"
    threshold = None
    if not _finite(challenger):
        promoted, reason = False, f"challenger exp_rmspe is {challenger}, not a finite number"
    elif model_attempt_uri is not None and champion is not None and (
            champion.get("source_model_uri") == model_attempt_uri):
        promoted, reason = False, f"this committed model ({model_attempt_uri}) already is the champion"
    elif not _finite(baseline):
        promoted, reason = False, (f"the naive baseline's exp_rmspe is {baseline}: the challenger cannot be shown "
                                   "to beat it")
    elif not float(challenger) < float(baseline) * (1.0 + baseline_tolerance):
        allowance = f" x (1 + {baseline_tolerance:g})" if baseline_tolerance else ""
        promoted, reason = False, (f"{versus_baseline}{allowance} {rows}: the challenger does not beat the "
                                   "baseline")
    elif champion is None:
        promoted, reason = True, (f"{versus_baseline} {rows}: beats the baseline, and there is no champion as of "
                                  "this date")
    else:
        scored = scores.get("champion_model_uri") or None
        if scored != champion.get("model_uri"):
            raise ScoredChampionError(
                f"the champion as of this date is {champion.get('model_uri')} (as of {champion.get('as_of')}), but "
                f"the train job scored {scored or 'no champion'} on its validation rows: the champion changed after "
                "find_champion ran. Clear find_champion and the tasks after it, so that train_model scores the "
                "current champion on the same rows.")
        if not _finite(champion_score):
            promoted, reason = True, (f"{versus_baseline} {rows}: beats the baseline; the champion's exp_rmspe on "
                                      f"these rows is {champion_score}, not a finite number")
        else:
            threshold = promotion_threshold(float(champion_score), tolerance)
            promoted = float(challenger) <= threshold
            relation = "<=" if promoted else ">"
            reason = (f"{versus_baseline} {rows}: beats the baseline; challenger {_fmt(challenger)} {relation} "
                      f"champion {_fmt(champion_score)} x (1 + {tolerance:g}) = {threshold:.5f}")
            if run_id is not None and champion.get("run_id") == run_id:
                strictly_better = float(challenger) < float(champion_score)
                promoted = promoted and strictly_better
                reason += (f"; a re-run of the champion's run {run_id} must also be strictly better: "
                           f"it is{'' if strictly_better else ' not'}")
    verdict = season_verdict(season, season_tolerance)
    if not verdict["passed"]:
        reason = f"{reason}; but {verdict['reason']}" if promoted else f"{reason}; {verdict['reason']}"
        promoted = False
    return {
        "promoted": promoted,
        "season_backtest": verdict,
        "candidate_val_exp_rmspe": None if challenger is None else float(challenger),
        "champion_val_exp_rmspe": None if champion is None or champion_score is None else float(champion_score),
        "baseline_val_exp_rmspe": None if baseline is None else float(baseline),
        "validation_rows": scores.get("validation_rows"),
        "tolerance": tolerance,
        "baseline_tolerance": baseline_tolerance,
        "threshold": threshold,
        "reason": reason,
    }
