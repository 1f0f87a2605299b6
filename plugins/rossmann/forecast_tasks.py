"""The DAG's Python task bodies: S3 reads and writes around the pure gate and output rules (the DAG only wires)."""
from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from rossmann import lineage
from rossmann.alerts import forecast_fallback_alert
from rossmann.gate import ScoredChampionError, champion_record_as_of, decide_promotion
from rossmann.outputs import (
    committed_attempt_uri,
    compare_and_set_json,
    copy_files,
    exists,
    list_uris,
    read_bytes,
    read_json,
    read_manifest,
    read_pointer,
    train_summary,
    write_bytes,
    write_json,
)
from rossmann.publication import forecast_registry_record, replaces_latest
from rossmann.report_link import ForecastReportLink, report_uri
from rossmann.uris import pinned_model_uri, published_forecast_uri, record_as_of
from rossmann_jobs.commit_protocol import attempt_uri
from rossmann_jobs.model.trust import DIGESTS_KEY, decode_digests, encode_digests, sha256_hex
from rossmann_jobs.output_layout import (
    MODEL_FILES,
    NAIVE_FORECAST_MODEL,
    PREDICTIONS_DIR,
    QUANTILES_FILE,
    SUBMISSION_FILE,
    TRAIN_METRICS_FILE,
    under,
)

log = logging.getLogger("rossmann.quality_gate")


class UnverifiedModelError(AirflowFailException):
    """The committed model's files are not the ones its train job wrote (or it recorded none): never promoted."""


class PublishedForecastChangedError(AirflowFailException):
    """A published copy holds other bytes than the attempt it was copied from holds now: it is never overwritten."""


# What forecasts the date when no model may (predict's --model ""): the naive seasonal baseline.
NAIVE_FALLBACK = NAIVE_FORECAST_MODEL


def scored_model(hook, plan: dict[str, str]) -> dict[str, Any]:
    """The committed model's metrics.json, reduced to the numbers the gate and the UI need, and the season
    backtest's facts (its commit summary; None when the run has none)."""
    attempt = committed_attempt_uri(hook, plan["model"])
    metrics_uri = under(attempt, TRAIN_METRICS_FILE)
    summary = train_summary(read_json(hook, metrics_uri), metrics_uri)
    season = None
    if plan.get("season_backtest"):
        season = (read_manifest(hook, plan["season_backtest"]).get("summary") or {}).get("season_backtest")
    return {**summary, "model_uri": plan["model"], "model_attempt_uri": attempt, "metrics_uri": metrics_uri,
            "season_backtest": season}


def champion_as_of(hook, plan: dict[str, str]) -> dict[str, Any] | None:
    """The champion as of the run's date: the history record with the greatest as-of date <= it (None: none)."""
    record_uri = champion_record_as_of(list_uris(hook, plan["champion_history"]), plan["as_of"])
    return None if record_uri is None else read_json(hook, record_uri)


def scored_champion(hook, plan: dict[str, str], scores: dict[str, Any],
                    current: dict[str, Any] | None) -> dict[str, Any] | None:
    """The champion record the train job scored beside its challenger (None: it scored none).

    The gate decides against what was compared on the same rows. Backfill runs of other dates may promote
    champions while this run trains; a champion as of this date that appeared since is then not the one scored,
    and the scored one (still a champion as of an earlier date <= this one) is looked up in the history by its
    model URI. Raises ScoredChampionError when the scored champion's record is gone (replaced by a later
    promotion for the same as-of date).
    """
    scored_uri = scores.get("champion_model_uri") or None
    if scored_uri is None:
        return None
    if current is not None and current.get("model_uri") == scored_uri:
        return current
    for record_uri in list_uris(hook, plan["champion_history"]):
        if record_as_of(record_uri) is not None and record_as_of(record_uri) <= plan["as_of"]:
            record = read_json(hook, record_uri)
            if record.get("model_uri") == scored_uri:
                return record
    raise ScoredChampionError(
        f"the train job scored the champion {scored_uri}, but no champion record as of {plan['as_of']} names it "
        f"any more (a later promotion for the same date replaced it): clear find_champion and the tasks after it, "
        "so that train_model scores the current champion on the same rows.")


def find_champion(hook, plan: dict[str, str], warm_start: bool = False) -> dict[str, Any]:
    """What the train job scores beside its challenger, and starts from when warm_start: the champion as of the
    run's date ("" model URIs: none, or no warm start). Never a later date's: a warm start stays point in time."""
    champion = champion_as_of(hook, plan)
    if champion is None:
        log.info("no champion as of %s: the challenger only has to beat the naive baseline (and starts cold)",
                 plan["as_of"])
        return {"as_of": plan["as_of"], "champion_model_uri": "", "champion_as_of": None, "champion_run_id": None,
                "warm_start_model_uri": "", "champion_model_sha256": ""}
    log.info("champion as of %s: %s (promoted for as-of %s, run %s)%s", plan["as_of"], champion["model_uri"],
             champion["as_of"], champion["run_id"], "; training starts from it" if warm_start else "")
    return {"as_of": plan["as_of"], "champion_model_uri": champion["model_uri"], "champion_as_of": champion["as_of"],
            "champion_run_id": champion["run_id"], "warm_start_model_uri": champion["model_uri"] if warm_start else "",
            # "" for a champion promoted before digests were recorded: the jobs refuse to load it (train: the
            # champion is not scored and the challenger only has to beat the baseline).
            "champion_model_sha256": record_digests(champion)}


def record_digests(champion: dict[str, Any]) -> str:
    """The champion record's model digests as the jobs' --*-sha256 argument ("" when it has none)."""
    return encode_digests(decode_digests(champion.get(DIGESTS_KEY)))


def pin_model(hook, candidate: str, pinned: str, manifest: dict[str, Any]) -> dict[str, str]:
    """Copy the committed attempt to its pinned place; the model files by value, hashed on the way, and checked
    against the digests the train job committed: the record then names exactly the bytes that were trained."""
    written = (manifest.get("summary") or {}).get(DIGESTS_KEY)
    expected = decode_digests(written)
    if sorted(expected) != sorted(MODEL_FILES):
        raise UnverifiedModelError(f"{candidate}: its train job recorded no SHA-256 digests of {list(MODEL_FILES)} "
                                   f"(commit summary {DIGESTS_KEY}): it is never promoted. Clear train_model "
                                   "and the tasks after it.")
    contents = {path: read_bytes(hook, under(candidate, path)) for path in MODEL_FILES}
    digests = {path: sha256_hex(data) for path, data in contents.items()}
    for path, digest in digests.items():   # every file checked before anything is pinned
        if digest != expected[path]:
            raise UnverifiedModelError(f"{under(candidate, path)}: SHA-256 {digest} differs from the "
                                       f"{expected[path]} its train job wrote: the file changed since. Not promoted.")
    for path, data in contents.items():
        write_bytes(hook, under(pinned, path), data)
    copy_files(hook, candidate, pinned, [path for path in manifest["files"] if path not in MODEL_FILES])
    return digests


def apply_quality_gate(hook, plan: dict[str, str], metrics: dict[str, Any], tolerance: float,
                       run_id: str, baseline_tolerance: float = 0.0, season: dict[str, Any] | None = None,
                       season_tolerance: float = 0.0) -> dict[str, Any]:
    """Promote the scored model if it beats the naive baseline and is not worse than the champion as of the run's
    date (all on the train job's validation rows), and the recipe beats the baseline on the calendar-matched
    backtest (`season`: the season backtest's facts); returns the decision and what forecasts the date: the
    promoted model, the champion as of the date, or, when the backtest refuses the network or there is no model to
    forecast with, the naive seasonal baseline (forecast_model NAIVE_FALLBACK, champion_model_uri "").

    A promoted model is pinned: its committed attempt is copied under `models/champions/` and the history record
    `models/champions/history/<as_of>.json` names the copy, so re-running the champion's run (which re-commits its
    model output) never changes the champion's weights under the same record. Writing the record (one conditional
    PUT: a compare-and-set against the version decided on) is the commit; a crash before it, or a lost race, leaves
    only an unreferenced copy. `models/champion.json` then follows the record unless it points at a later as-of
    date's champion (a backfill never replaces it).
    """
    manifest = read_manifest(hook, plan["model"])
    candidate = attempt_uri(plan["model"], manifest)
    if candidate != metrics["model_attempt_uri"]:
        raise RuntimeError(f"{plan['model']} now commits {candidate}, but read_train_metrics scored "
                           f"{metrics['model_attempt_uri']}: clear read_train_metrics and the tasks after it.")
    scores = metrics.get("gate_scores")
    if not scores:
        raise ValueError(f"{metrics['metrics_uri']} has no gate_scores (challenger, champion and baseline on the same "
                         "validation rows): it was written by an older train job. Clear train_model and the tasks "
                         "after it.")
    pinned = pinned_model_uri(plan["champion_models"], candidate)
    seen: dict[str, Any] = {}

    def decide(same_date: dict[str, Any] | None) -> dict[str, Any] | None:
        """The record to write for the run's date, decided against `same_date` (the version of that date's record
        the conditional PUT replaces; None: none yet); None when nothing is promoted."""
        record_uri = champion_record_as_of(list_uris(hook, plan["champion_history"]), plan["as_of"])
        current = same_date if record_uri == plan["champion_record"] and same_date is not None else (
            None if record_uri is None else read_json(hook, record_uri))
        if same_date is not None and same_date.get("source_model_uri") == candidate:
            champion = same_date   # this run promoted this model already (the gate re-run after its commit): kept
        else:
            champion = scored_champion(hook, plan, scores, current)
        decision = decide_promotion(scores, champion, tolerance, baseline_tolerance=baseline_tolerance,
                                    run_id=run_id, model_attempt_uri=candidate, season=season,
                                    season_tolerance=season_tolerance)
        seen.update(current=current, champion=champion, decision=decision, same_date=same_date)
        if not decision["promoted"]:
            return None
        if same_date is not None and same_date.get("model_uri") != (champion or {}).get("model_uri"):
            # Another run promoted a champion for this date after this run's find_champion: this model was never
            # compared with it, so it must not replace it.
            raise ScoredChampionError(
                f"{plan['champion_record']} names {same_date.get('model_uri')} (run {same_date.get('run_id')}, "
                f"promoted at {same_date.get('promoted_at')}), a champion for {plan['as_of']} that this run's train "
                f"job did not score (it scored {(champion or {}).get('model_uri') or 'no champion'}): a concurrent "
                f"run for the same date promoted it. Not replaced: clear find_champion and the tasks after it, so "
                "that train_model scores it on the same rows.")
        if "digests" not in seen:   # pinned once: a lost compare-and-set re-decides, it does not re-copy
            seen["digests"] = pin_model(hook, candidate, pinned, manifest)
        return {"model_uri": pinned, "source_model_uri": candidate, DIGESTS_KEY: seen["digests"],
                "val_exp_rmspe": metrics["best_val_exp_rmspe"], "gate_scores": scores,
                "features_uri": plan["features"], "run_id": run_id, "as_of": plan["as_of"],
                "promoted_at": datetime.now(timezone.utc).isoformat()}

    # The commit: one conditional PUT of the date's record, made only if the record is still the version decided
    # against (two runs for one date cannot both promote; the loser re-decides against the winner's record).
    promoted = compare_and_set_json(hook, plan["champion_record"], decide)
    decision, champion, current, same_date = (seen[key] for key in ("decision", "champion", "current", "same_date"))
    # The pointer follows the date's record: this promotion's, or one whose pointer update was cut short (a crash
    # between the two PUTs, then this re-run of the gate); nothing is written when it holds it or a later date's.
    if promoted is not None or same_date is not None:
        advance_pointer(hook, plan["champion"], promoted or same_date)
    if promoted is not None:
        champion = promoted
        lineage.report_task_lineage(hook, [plan["model"]], [pinned, plan["champion_record"]])
    elif current is not None:
        # Not promoted: the champion as of this date, as re-read now, forecasts, not the one train scored. Another
        # run for this date may have promoted since this run's find_champion (its record now names the date's
        # champion), or a backfill of an earlier date promoted one as of this date (trained on data up to its own
        # date <= this one, so it may forecast this date).
        champion = current
    # When this decision was made, after the date's record was read for the last time: for one as-of date, the
    # forecast of a later decision replaces an earlier one's in forecast/latest.json, never the other way round.
    decided_at = datetime.now(timezone.utc).isoformat()
    fallback = None
    if not decision["season_backtest"]["passed"]:
        fallback = (f"no network forecasts as of {plan['as_of']}: {decision['season_backtest']['reason']}")
    elif champion is None:
        fallback = (f"no model trained on data up to {plan['as_of']} beats the naive baseline: this run's model was "
                    f"not promoted ({decision['reason']}) and there is no champion as of {plan['as_of']}")
    if fallback is not None:
        log.warning("quality gate: %s -> the naive seasonal baseline forecasts as-of %s (the fallback)", fallback,
                    plan["as_of"])
        return {**decision, "candidate_model_uri": candidate, "champion_model_uri": "", "champion_model_sha256": "",
                "champion_run_id": None, "champion_as_of": None, "forecast_model": NAIVE_FALLBACK,
                "fallback_reason": fallback, "decided_at": decided_at}
    log.info("quality gate: %s -> %s; %s forecasts as-of %s with %s (champion as of %s)", decision["reason"],
             "PROMOTED" if decision["promoted"] else "KEPT",
             "the promoted challenger" if decision["promoted"] else "the champion", plan["as_of"],
             champion["model_uri"], champion["as_of"])
    return {**decision, "candidate_model_uri": candidate, "champion_model_uri": champion["model_uri"],
            "champion_model_sha256": record_digests(champion),
            "champion_run_id": champion["run_id"], "champion_as_of": champion["as_of"],
            "forecast_model": "challenger" if decision["promoted"] else "champion", "fallback_reason": None,
            "decided_at": decided_at}


def advance_pointer(hook, uri: str, record: dict[str, Any]) -> bool:
    """Point uri (`models/champion.json`, `forecast/latest.json`) at record unless it holds a later as-of date's, or
    the same date's from a later decision (publication.replaces_latest); returns whether it holds record now. A
    compare-and-set, so a backfill that read the pointer before a newer date's run moved it never moves it back."""
    holds = {}

    def change(latest: dict[str, Any] | None) -> dict[str, Any] | None:
        holds["now"] = latest == record or replaces_latest(record, latest)
        return record if holds["now"] and latest != record else None

    compare_and_set_json(hook, uri, change)
    return holds["now"]


def publish_copy(hook, attempt: str, published: str, files: list[str]) -> dict[str, str]:
    """Copy the committed attempt's files to `published` by value, hashed on the way: returns their SHA-256 by path
    (relative to the attempt). The copy is the published forecast: nothing writes it again. A file already there (a
    re-run of publish_forecast for the same attempt) is kept as it is, and must hold the attempt's bytes."""
    digests = {}
    for path in files:
        data = read_bytes(hook, under(attempt, path))
        digests[path] = sha256_hex(data)
        target = under(published, path)
        if not exists(hook, target):
            write_bytes(hook, target, data)
        elif (kept := sha256_hex(read_bytes(hook, target))) != digests[path]:
            raise PublishedForecastChangedError(
                f"{target} was published with SHA-256 {kept}, but {under(attempt, path)} now holds {digests[path]}: "
                "the attempt changed after it was published. The published copy is kept; re-run predict (a new "
                "attempt) and publish_forecast to publish a new forecast.")
    return digests


def newer_same_date_champion(hook, plan: dict[str, str], forecast: dict[str, Any]) -> dict[str, Any] | None:
    """The date's champion record when it names another model than the one this forecast used (None otherwise, and
    for a naive fallback): a run for this date promoted it after this run's gate decided, so this forecast is not
    the date's latest decision."""
    if forecast["forecast_model"] == NAIVE_FALLBACK:
        return None
    record = read_pointer(hook, plan["champion_record"])
    return record if record is not None and record.get("model_uri") != forecast["model_uri"] else None


def publish_forecast(hook, plan: dict[str, str], gate: dict[str, Any], run_id: str,
                     context: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool]:
    """Check the committed forecast, copy it to `forecast/published/<as_of>/<run key>/<attempt id>/` (Airflow's
    prefix, the jobs may not write it; the SHA-256 of every file in the registry record), and point
    `forecast/latest.json` at the copy unless that holds a newer as-of date's forecast or a later decision for the
    same date; returns the forecast record (the pointer's content) and whether the pointer now holds it. Re-running
    predict (a new attempt, the old one deleted) never changes a published forecast. A naive fallback forecast is
    published like any other, marked (forecast_model, fallback_reason) in the pointer and the registry, and posts
    one "forecast fallback" alert (context: the task's, for the alert's notifier)."""
    manifest = read_manifest(hook, plan["predictions"])   # one read: the attempt and the job's summary
    attempt, summary = attempt_uri(plan["predictions"], manifest), manifest.get("summary", {})
    forecast_model = gate.get("forecast_model") or "champion"
    if (forecast_model == NAIVE_FALLBACK) != (summary.get("forecast_model") == NAIVE_FALLBACK):
        raise RuntimeError(f"the gate chose {forecast_model} to forecast, but {plan['predictions']} commits a "
                           f"forecast of {summary.get('forecast_model') or 'a model'}: clear predict and the tasks "
                           "after it.")
    missing = [uri for uri in (under(attempt, SUBMISSION_FILE), report_uri(attempt)) if not exists(hook, uri)]
    if missing:
        raise FileNotFoundError(f"The committed predict output lacks {missing}: the predict job's output "
                                "contract is in docs/ARCHITECTURE.md")
    published = published_forecast_uri(plan["forecast_published"], attempt)
    digests = publish_copy(hook, attempt, published, list(manifest["files"]))
    forecast = {
        "as_of": plan["as_of"],
        "run_id": run_id,
        "model_uri": gate["champion_model_uri"] or NAIVE_FALLBACK,
        "forecast_model": forecast_model,
        "fallback_reason": gate.get("fallback_reason"),
        "submission_uri": under(published, SUBMISSION_FILE),
        "quantiles_uri": under(published, QUANTILES_FILE),     # P10/P50/P90 per Id (forecast_quantiles.csv)
        "report_uri": report_uri(published),
        "predictions_uri": under(published, PREDICTIONS_DIR),
        "published_uri": published,
        "source_attempt_uri": attempt,
        "forecast_sha256": digests,
        # The gate's decision time orders two forecasts for one date ("" from a gate older than it: the oldest).
        "decided_at": gate.get("decided_at") or "",
        "forecast_val_exp_rmspe": summary.get("validation_exp_rmspe"),
        "forecast_rows": summary.get("rows"),
        "published_at": datetime.now(timezone.utc).isoformat(),
    }
    # The report's URI only: a presigned URL is a bearer credential, so it goes to the predict task's "Forecast
    # report" extra link alone (report_link.py), never to a log or a return value.
    log.info("forecast report (one self-contained page): %s; the predict task's \"%s\" link opens it",
             forecast["report_uri"], ForecastReportLink.name)
    # Every published forecast is registered, backfills included, so later drops can score it (one PUT; a re-run
    # replaces the run's own record).
    write_json(hook, plan["forecast_record"], forecast_registry_record(forecast, summary))
    forecast["record_uri"] = plan["forecast_record"]
    lineage.report_task_lineage(hook, [plan["predictions"]], [published, plan["forecast_record"]])
    if forecast_model == NAIVE_FALLBACK:
        post_fallback_alert(forecast, context or {})
    newer = newer_same_date_champion(hook, plan, forecast)
    if newer is not None:
        log.warning("forecast for as-of %s published at %s with %s, but %s now names %s (run %s, promoted at %s): "
                    "a later decision for this date; %s is left to that run's forecast", plan["as_of"], published,
                    forecast["model_uri"], plan["champion_record"], newer.get("model_uri"), newer.get("run_id"),
                    newer.get("promoted_at"), plan["forecast_pointer"])
        return forecast, False
    if not advance_pointer(hook, plan["forecast_pointer"], forecast):
        current = read_pointer(hook, plan["forecast_pointer"]) or {}
        log.warning("forecast for as-of %s published at %s; %s keeps the forecast of as-of %s (run %s, decided at "
                    "%s): a newer date's, or a later decision for this date", plan["as_of"], published,
                    plan["forecast_pointer"], current.get("as_of"), current.get("run_id"), current.get("decided_at"))
        return forecast, False
    lineage.report_task_lineage(hook, [published], [plan["forecast_pointer"]])
    return forecast, True


def post_fallback_alert(forecast: dict[str, Any], context: dict[str, Any]) -> None:
    """One "forecast fallback" alert: the naive seasonal baseline is the day's published forecast, and why. An alert
    endpoint outage does not hold back the forecast (logged)."""
    details = {key: forecast[key] for key in ("as_of", "run_id", "fallback_reason", "report_uri")}
    try:
        forecast_fallback_alert(details).notify(context)
    except Exception:
        log.exception("the forecast fallback alert could not be posted")
