"""The quality gate: champion as of a date (history), the rule on same-row scores, and its S3 shell on a fake hook."""
from __future__ import annotations

import hashlib
import io
import json
import math
from datetime import date
from types import SimpleNamespace

import pytest
from botocore.exceptions import ClientError

from rossmann.forecast_tasks import NAIVE_FALLBACK, apply_quality_gate, find_champion
from rossmann.gate import ScoredChampionError, champion_record_as_of, decide_promotion, season_verdict
from rossmann.uris import plan_run_uris, run_key
from rossmann_jobs.commit_protocol import manifest_document, manifest_uri
from rossmann_jobs.model.trust import sha256_hex

HISTORY = "s3://b/models/champions/history"


def scores(challenger, baseline, champion=None, champion_model_uri=None, rows=420):
    return {"challenger": challenger, "baseline": baseline, "champion": champion,
            "champion_model_uri": champion_model_uri, "validation_rows": rows}


def record(model_uri="s3://b/models/champions/2015-07-30/r0/a0", run_id="r0", as_of="2015-07-30", **extra):
    return {"model_uri": model_uri, "source_model_uri": f"s3://b/runs/{as_of}/{run_id}/model/attempts/a0",
            "run_id": run_id, "as_of": as_of, "val_exp_rmspe": 0.01, **extra}


# --- champion as of a date (pure) -------------------------------------------------------------------------------

def test_champion_as_of_is_the_latest_record_on_or_before_the_date_never_a_later_one():
    records = [f"{HISTORY}/{day}.json" for day in ("2015-07-31", "2015-06-30", "2015-07-15")]
    assert champion_record_as_of(records, "2015-07-20") == f"{HISTORY}/2015-07-15.json"
    assert champion_record_as_of(records, "2015-07-31") == f"{HISTORY}/2015-07-31.json"   # the same day counts
    assert champion_record_as_of(records, "2015-08-05") == f"{HISTORY}/2015-07-31.json"
    assert champion_record_as_of(records, "2015-07-14") == f"{HISTORY}/2015-06-30.json"
    assert champion_record_as_of(records, "2015-06-29") is None                          # only later champions
    assert champion_record_as_of([], "2015-07-31") is None


def test_champion_as_of_ignores_objects_that_are_not_records():
    records = [f"{HISTORY}/2015-07-01.json", f"{HISTORY}/2015-07-10.json.tmp", f"{HISTORY}/notes.json",
               f"{HISTORY}/20150709.json"]
    assert champion_record_as_of(records, "2015-07-31") == f"{HISTORY}/2015-07-01.json"


# --- the rule (pure) --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("challenger, baseline", [(0.30, 0.25), (0.25, 0.25)])
def test_a_challenger_that_does_not_strictly_beat_the_baseline_is_never_promoted(challenger, baseline):
    alone = decide_promotion(scores(challenger, baseline), None, 0.0)
    assert alone["promoted"] is False and "does not beat the baseline" in alone["reason"]
    # Not even when the champion is worse still: the baseline is a veto.
    champion = record()
    worse = decide_promotion(scores(challenger, baseline, 0.9, champion["model_uri"]), champion, 0.5)
    assert worse["promoted"] is False and "does not beat the baseline" in worse["reason"]
    assert (worse["candidate_val_exp_rmspe"], worse["baseline_val_exp_rmspe"], worse["champion_val_exp_rmspe"]) == (
        challenger, baseline, 0.9)


def test_without_a_champion_beating_the_baseline_promotes():
    decision = decide_promotion(scores(0.2, 0.25), None, -0.99)
    assert decision["promoted"] is True and decision["champion_val_exp_rmspe"] is None
    assert "no champion as of this date" in decision["reason"] and decision["threshold"] is None
    assert "0.20000" in decision["reason"] and "0.25000" in decision["reason"] and "420" in decision["reason"]


def test_the_champion_is_compared_on_the_same_rows_never_on_its_recorded_score():
    champion = record(val_exp_rmspe=0.01)   # measured on its own (other) validation rows: ignored
    beaten = decide_promotion(scores(0.20, 0.30, 0.22, champion["model_uri"]), champion, 0.0)
    assert beaten["promoted"] is True and beaten["champion_val_exp_rmspe"] == 0.22
    assert beaten["threshold"] == pytest.approx(0.22)
    champion = record(val_exp_rmspe=0.99)
    kept = decide_promotion(scores(0.20, 0.30, 0.15, champion["model_uri"]), champion, 0.0)
    assert kept["promoted"] is False and " > " in kept["reason"]


def test_a_champion_the_train_job_did_not_score_cannot_be_compared():
    champion = record()
    for scored in (None, "s3://b/models/champions/2015-07-01/other/a9"):
        with pytest.raises(ScoredChampionError, match="Clear find_champion"):
            decide_promotion(scores(0.2, 0.3, 0.25, scored), champion, 0.0)
    # A baseline veto needs no champion comparison, and a champion that disappeared needs none either.
    assert decide_promotion(scores(0.4, 0.3, None, None), champion, 0.0)["promoted"] is False
    assert decide_promotion(scores(0.2, 0.3, 0.25, champion["model_uri"]), None, 0.0)["promoted"] is True


@pytest.mark.parametrize("candidate, champion_score, tolerance, promoted", [
    (0.150, 0.150, 0.0, True),     # equal is "not worse"
    (0.149, 0.150, 0.0, True),
    (0.151, 0.150, 0.0, False),
    (0.153, 0.150, 0.05, True),    # within 5 % of the champion
    (0.160, 0.150, 0.05, False),   # 0.160 > 0.1575
    (0.149, 0.150, -0.05, False),  # negative tolerance demands a 5 % improvement: threshold 0.1425
    (0.140, 0.150, -0.05, True),
])
def test_gate_promotes_only_models_that_are_not_worse(candidate, champion_score, tolerance, promoted):
    champion = record()
    decision = decide_promotion(scores(candidate, 0.5, champion_score, champion["model_uri"]), champion, tolerance)
    assert decision["promoted"] is promoted
    assert decision["threshold"] == pytest.approx(champion_score * (1 + tolerance))
    assert decision["candidate_val_exp_rmspe"] == candidate and decision["champion_val_exp_rmspe"] == champion_score


def test_non_finite_scores():
    champion = record()
    for score in (math.nan, math.inf, None):
        assert decide_promotion(scores(score, 0.3), None, 0.0)["promoted"] is False
        assert decide_promotion(scores(score, 0.3, 0.2, champion["model_uri"]), champion, 0.5)["promoted"] is False
        assert decide_promotion(scores(0.2, score), None, 0.0)["promoted"] is False       # no baseline: no proof
        # A champion that forecasts nothing finite on these rows is replaced by one that beats the baseline.
        assert decide_promotion(scores(0.2, 0.3, score, champion["model_uri"]), champion, 0.0)["promoted"] is True


def test_the_committed_attempt_that_is_champion_stays_champion():
    attempt = "s3://b/runs/2015-07-31/r1/model/attempts/20150801T000000Z-aaaa"
    champion = record(source_model_uri=attempt, run_id="r1")
    for tolerance in (0.0, 0.5):
        decision = decide_promotion(scores(0.15, 0.3, 0.2, "s3://b/an/older/champion"), champion, tolerance,
                                    run_id="r1", model_attempt_uri=attempt)
        assert decision["promoted"] is False and "already is the champion" in decision["reason"]


@pytest.mark.parametrize("candidate, tolerance, promoted", [
    (0.150, 0.0, False),   # a tie promotes a new run's model, but not a re-run's
    (0.155, 0.1, False),   # nor does a positive tolerance
    (0.149, 0.0, True),
    (0.149, -0.05, False),  # a negative tolerance still applies
])
def test_a_rerun_of_the_champions_run_must_be_strictly_better(candidate, tolerance, promoted):
    champion = record(run_id="r1")
    same_rows = scores(candidate, 0.3, 0.150, champion["model_uri"])
    rerun = decide_promotion(same_rows, champion, tolerance, run_id="r1",
                             model_attempt_uri="s3://b/runs/d/r1/model/attempts/new")
    assert rerun["promoted"] is promoted and "strictly better" in rerun["reason"]
    other_run = decide_promotion(same_rows, champion, tolerance, run_id="r2",
                                 model_attempt_uri="s3://b/runs/d/r2/model/attempts/new")
    assert other_run["promoted"] is (candidate <= 0.150 * (1 + tolerance))


# --- the S3 shell on an in-memory hook --------------------------------------------------------------------------

class FakeS3Hook:
    """The S3Hook calls plugins/rossmann/outputs.py makes, on a dict of (bucket, key) -> text or bytes."""

    def __init__(self):
        self.objects: dict[tuple[str, str], str] = {}

    @staticmethod
    def _split(uri: str) -> tuple[str, str]:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        return bucket, key

    def check_for_key(self, key, bucket_name):
        return (bucket_name, key) in self.objects

    def read_key(self, key, bucket_name):
        return self.objects[(bucket_name, key)]

    def load_string(self, string_data, key, bucket_name, replace=False):
        self.objects[(bucket_name, key)] = string_data

    def list_keys(self, bucket_name, prefix=""):
        return sorted(key for bucket, key in self.objects if bucket == bucket_name and key.startswith(prefix))

    def load_bytes(self, bytes_data, key, bucket_name, replace=False):
        self.objects[(bucket_name, key)] = bytes_data

    def get_key(self, key, bucket_name):
        data = self.objects[(bucket_name, key)]
        body = data if isinstance(data, bytes) else data.encode()
        return SimpleNamespace(get=lambda: {"Body": io.BytesIO(body)})

    def copy_object(self, source_bucket_key, dest_bucket_key):
        self.objects[self._split(dest_bucket_key)] = self.objects[self._split(source_bucket_key)]

    def json(self, uri: str):
        return json.loads(self.objects[self._split(uri)])

    def get_conn(self):
        return FakeS3Client(self.objects)


class FakeS3Client:
    """The boto3 client calls of outputs.py's compare-and-set: GET with the ETag, PUT with If-Match/If-None-Match."""

    def __init__(self, objects: dict):
        self.objects = objects

    @staticmethod
    def etag(data) -> str:
        return '"%s"' % hashlib.md5(data if isinstance(data, bytes) else data.encode()).hexdigest()

    def get_object(self, Bucket, Key):   # noqa: N803 (boto3's names)
        if (Bucket, Key) not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")
        data = self.objects[(Bucket, Key)]
        return {"Body": io.BytesIO(data if isinstance(data, bytes) else data.encode()), "ETag": self.etag(data)}

    def put_object(self, Bucket, Key, Body, IfMatch=None, IfNoneMatch=None, **_):   # noqa: N803
        existing = self.objects.get((Bucket, Key))
        if (IfNoneMatch == "*" and existing is not None) or (
                IfMatch is not None and (existing is None or self.etag(existing) != IfMatch)):
            raise ClientError({"Error": {"Code": "PreconditionFailed"}}, "PutObject")
        self.objects[(Bucket, Key)] = Body.decode()


def model_files(run_id: str) -> dict[str, bytes]:
    return {"model/artifact.json": f'{{"run": "{run_id}"}}'.encode(), "model/weights.npz": f"weights {run_id}".encode()}


def trained(hook: FakeS3Hook, as_of: str, run_id: str, gate_scores: dict, bucket: str = "b") -> tuple[dict, dict]:
    """A committed model output of one run, and read_train_metrics' XCom for it."""
    plan = plan_run_uris(bucket, date.fromisoformat(as_of), run_id)
    attempt = f"{plan['model']}/attempts/a-{run_id}"
    contents = {**model_files(run_id), "metrics.json": b"{}"}
    for name, content in contents.items():
        hook.load_bytes(content, *reversed(FakeS3Hook._split(f"{attempt}/{name}")))
    files = [f"{attempt}/{name}" for name in contents]
    digests = {name: sha256_hex(content) for name, content in contents.items() if name.startswith("model/")}
    hook.load_string(json.dumps(manifest_document(plan["model"], attempt, files, {"model_sha256": digests})),
                     *reversed(FakeS3Hook._split(manifest_uri(plan["model"]))))
    metrics = {"model_attempt_uri": attempt, "metrics_uri": f"{attempt}/metrics.json",
               "best_val_exp_rmspe": gate_scores["challenger"], "gate_scores": gate_scores}
    return plan, metrics


def gate(hook, as_of, run_id, challenger, baseline=0.5, champion_score=None, tolerance=0.0, season=None):
    plan = plan_run_uris("b", date.fromisoformat(as_of), run_id)
    found = find_champion(hook, plan)
    same_rows = scores(challenger, baseline, champion_score if found["champion_model_uri"] else None,
                       found["champion_model_uri"] or None)
    plan, metrics = trained(hook, as_of, run_id, same_rows)
    return found, apply_quality_gate(hook, plan, metrics, tolerance, run_id, season=season)


def backtest(challenger, baseline, available=True):
    """The season backtest's facts as the train job's --season-backtest commits them."""
    if not available:
        return {"available": False, "reason": "too short a history"}
    return {"available": True, "challenger": challenger, "baseline": baseline, "origin": "2014-08-01",
            "window_start": "2014-08-02", "window_end": "2014-09-18", "scored_rows": 900}


def test_history_by_as_of_date_and_the_newest_pointer():
    hook = FakeS3Hook()
    found, first = gate(hook, "2015-07-31", "r1", 0.20)
    assert found["champion_model_uri"] == "" and first["promoted"] and first["forecast_model"] == "challenger"
    pinned = f"s3://b/models/champions/2015-07-31/{run_key('r1')}/a-r1"
    assert first["champion_model_uri"] == pinned and first["champion_as_of"] == "2015-07-31"
    assert hook.json(f"{HISTORY}/2015-07-31.json")["model_uri"] == pinned
    assert hook.json("s3://b/models/champion.json")["model_uri"] == pinned
    assert hook.objects[("b", f"models/champions/2015-07-31/{run_key('r1')}/a-r1/model/weights.npz")] == b"weights r1"
    # The record holds the SHA-256 of the pinned model files, and hands them on to the jobs that load it.
    recorded = hook.json(f"{HISTORY}/2015-07-31.json")["model_sha256"]
    assert recorded == {name: sha256_hex(content) for name, content in model_files("r1").items()}
    assert json.loads(first["champion_model_sha256"]) == recorded
    assert json.loads(find_champion(hook, plan_run_uris("b", date(2015, 8, 1), "r9"))["champion_model_sha256"]) == (
        recorded)

    # A backfill of an earlier date never sees the later champion: it is promoted on the baseline alone, gets its
    # own record, and the pointer keeps the newest date's champion.
    found, backfill = gate(hook, "2015-06-30", "r0", 0.40, tolerance=-0.99)
    assert found["champion_model_uri"] == "" and backfill["promoted"] and backfill["champion_val_exp_rmspe"] is None
    assert hook.json(f"{HISTORY}/2015-06-30.json")["run_id"] == "r0"
    assert hook.json("s3://b/models/champion.json")["model_uri"] == pinned

    # A date in between is served by the earlier champion; a worse challenger leaves it forecasting.
    found, between = gate(hook, "2015-07-15", "r2", 0.45, champion_score=0.40)
    assert found["champion_as_of"] == "2015-06-30"
    assert between["promoted"] is False and between["forecast_model"] == "champion"
    assert between["champion_model_uri"] == f"s3://b/models/champions/2015-06-30/{run_key('r0')}/a-r0"
    assert (between["candidate_val_exp_rmspe"], between["champion_val_exp_rmspe"],
            between["baseline_val_exp_rmspe"]) == (0.45, 0.40, 0.5)
    assert ("b", "models/champions/history/2015-07-15.json") not in hook.objects

    # A later promotion for the same as-of date replaces that date's record (and the pointer, same date).
    found, again = gate(hook, "2015-07-31", "r3", 0.10, champion_score=0.20)
    assert found["champion_run_id"] == "r1" and again["promoted"]
    assert hook.json(f"{HISTORY}/2015-07-31.json")["run_id"] == "r3"
    assert hook.json("s3://b/models/champion.json")["run_id"] == "r3"
    assert sorted(key for _b, key in hook.objects if key.startswith("models/champions/history/")) == [
        f"models/champions/history/{day}.json" for day in ("2015-06-30", "2015-07-31")]


def test_no_champion_and_no_win_over_the_baseline_forecasts_with_the_naive_fallback():
    hook = FakeS3Hook()
    _found, decision = gate(hook, "2015-07-31", "r1", 0.6, baseline=0.5)
    assert decision["promoted"] is False and decision["forecast_model"] == NAIVE_FALLBACK
    # predict's --model "" is the naive seasonal baseline; nothing is promoted or pinned.
    assert decision["champion_model_uri"] == "" and decision["champion_model_sha256"] == ""
    assert "no model trained on data up to 2015-07-31 beats the naive baseline" in decision["fallback_reason"]
    assert not [key for _b, key in hook.objects if key.startswith("models/")]


# --- the season backtest --------------------------------------------------------------------------------------

def test_the_season_verdict_refuses_a_network_that_loses_to_naive_a_year_earlier():
    assert season_verdict(backtest(0.12, 0.13))["passed"] is True
    lost = season_verdict(backtest(0.14, 0.13))
    assert lost["passed"] is False and "loses to the naive baseline" in lost["reason"]
    assert "2014-08-02 .. 2014-09-18" in lost["reason"] and "0.14000" in lost["reason"]
    assert season_verdict(backtest(0.13, 0.13))["passed"] is False          # a tie does not beat it
    assert season_verdict(backtest(0.135, 0.13), tolerance=0.05)["passed"] is True
    # No backtest (too short a history, none run, no finite scores): the recent window alone decides, saying so.
    for missing in (backtest(None, None, available=False), None, backtest(math.nan, 0.13), backtest(0.1, None)):
        verdict = season_verdict(missing)
        assert verdict["passed"] is True and "backtest" in verdict["reason"]


def test_good_on_the_recent_window_but_losing_in_the_backtest_season_is_not_promoted_and_falls_back():
    """The challenger beats the baseline by far on the recent window (the 48 days up to D) and there is no
    champion, but the recipe replayed a year earlier loses to naive in the horizon's season: not promoted, and the
    naive seasonal baseline forecasts the date."""
    hook = FakeS3Hook()
    _found, decision = gate(hook, "2015-07-31", "r1", 0.10, baseline=0.20, season=backtest(0.16, 0.14))
    assert decision["promoted"] is False and decision["forecast_model"] == NAIVE_FALLBACK
    assert decision["candidate_val_exp_rmspe"] == 0.10 and decision["season_backtest"]["passed"] is False
    assert "beats the baseline" in decision["reason"] and "loses to the naive baseline" in decision["reason"]
    assert "no network forecasts as of 2015-07-31" in decision["fallback_reason"]
    assert not [key for _b, key in hook.objects if key.startswith("models/")]
    # The same scores with a backtest the network wins: promoted, and it forecasts.
    _found, won = gate(FakeS3Hook(), "2015-07-31", "r1", 0.10, baseline=0.20, season=backtest(0.12, 0.14))
    assert won["promoted"] is True and won["forecast_model"] == "challenger" and won["fallback_reason"] is None


def test_a_lost_season_backtest_keeps_the_champion_from_forecasting_too():
    hook = FakeS3Hook()
    gate(hook, "2015-06-30", "r0", 0.20)                       # a champion as of an earlier date
    found, decision = gate(hook, "2015-07-31", "r1", 0.15, champion_score=0.18, season=backtest(0.2, 0.1))
    assert found["champion_as_of"] == "2015-06-30"
    assert decision["promoted"] is False and decision["forecast_model"] == NAIVE_FALLBACK
    assert decision["champion_model_uri"] == ""
    assert ("b", "models/champions/history/2015-07-31.json") not in hook.objects


def test_a_champion_promoted_after_train_scored_does_not_change_the_decision():
    """Backfill runs overlap: an earlier date's run may promote while a later date's run trains. The later gate
    decides against what its train job scored on the same rows; if it promotes nothing, the newly promoted champion
    (as of an earlier date, so trained on data up to it) forecasts instead of failing the run."""
    hook = FakeS3Hook()
    plan = plan_run_uris("b", date(2015, 7, 31), "r2")
    found = find_champion(hook, plan)                  # nothing yet: train scores no champion
    gate(hook, "2015-07-20", "r1", 0.2)               # meanwhile another run promotes a champion as of 07-20
    plan, metrics = trained(hook, "2015-07-31", "r2", scores(0.1, 0.5, None, found["champion_model_uri"] or None))
    decision = apply_quality_gate(hook, plan, metrics, 0.0, "r2")
    assert decision["promoted"] and decision["champion_val_exp_rmspe"] is None
    assert hook.json(f"{HISTORY}/2015-07-31.json")["run_id"] == "r2"

    plan, metrics = trained(hook, "2015-07-30", "r3", scores(0.7, 0.5, None, None))   # loses to the baseline
    decision = apply_quality_gate(hook, plan, metrics, 0.0, "r3")
    assert not decision["promoted"] and decision["champion_as_of"] == "2015-07-20"


def test_the_scored_champion_is_found_in_the_history_when_a_newer_one_appeared():
    hook = FakeS3Hook()
    gate(hook, "2015-07-10", "r1", 0.3)
    plan = plan_run_uris("b", date(2015, 7, 31), "r3")
    found = find_champion(hook, plan)                  # train scores the 07-10 champion
    gate(hook, "2015-07-20", "r2", 0.2, champion_score=0.3)   # meanwhile a 07-20 champion is promoted
    plan, metrics = trained(hook, "2015-07-31", "r3", scores(0.25, 0.5, 0.3, found["champion_model_uri"]))
    decision = apply_quality_gate(hook, plan, metrics, 0.0, "r3")
    assert decision["promoted"] and decision["champion_val_exp_rmspe"] == 0.3   # compared with the scored one


def test_a_scored_champion_whose_record_was_replaced_stops_the_gate():
    hook = FakeS3Hook()
    gate(hook, "2015-07-20", "r1", 0.3)
    plan = plan_run_uris("b", date(2015, 7, 31), "r3")
    found = find_champion(hook, plan)
    gate(hook, "2015-07-20", "r2", 0.2, champion_score=0.3)   # the same date's record now names another model
    plan, metrics = trained(hook, "2015-07-31", "r3", scores(0.25, 0.5, 0.3, found["champion_model_uri"]))
    with pytest.raises(ScoredChampionError, match="Clear find_champion|clear find_champion"):
        apply_quality_gate(hook, plan, metrics, 0.0, "r3")


def test_metrics_without_gate_scores_are_refused():
    hook = FakeS3Hook()
    plan, metrics = trained(hook, "2015-07-31", "r1", scores(0.2, 0.5))
    del metrics["gate_scores"]
    with pytest.raises(ValueError, match="no gate_scores"):
        apply_quality_gate(hook, plan, metrics, 0.0, "r1")


def test_a_baseline_tolerance_lets_a_smoke_run_within_it_through_and_no_further():
    assert not decide_promotion(scores(0.13, 0.12), None, 0.0)["promoted"]
    assert decide_promotion(scores(0.13, 0.12), None, 0.0, baseline_tolerance=0.25)["promoted"]
    refused = decide_promotion(scores(0.16, 0.12), None, 0.0, baseline_tolerance=0.25)
    assert not refused["promoted"] and "x (1 + 0.25)" in refused["reason"]


def test_warm_start_uses_the_champion_as_of_the_date_never_a_later_one():
    hook = FakeS3Hook()
    gate(hook, "2015-07-10", "r1", 0.3)
    gate(hook, "2015-07-20", "r2", 0.2, champion_score=0.3)
    as_of_15 = find_champion(hook, plan_run_uris("b", date(2015, 7, 15), "r3"), warm_start=True)
    assert as_of_15["warm_start_model_uri"] == as_of_15["champion_model_uri"] == (
        f"s3://b/models/champions/2015-07-10/{run_key('r1')}/a-r1")   # not the 07-20 model, trained on later data
    assert find_champion(hook, plan_run_uris("b", date(2015, 7, 15), "r4"))["warm_start_model_uri"] == ""   # off
    first = find_champion(hook, plan_run_uris("b", date(2015, 7, 1), "r5"), warm_start=True)
    assert first["warm_start_model_uri"] == first["champion_model_uri"] == ""   # no champion yet: a cold start


def test_a_model_changed_after_its_train_job_wrote_it_is_never_promoted():
    from rossmann.forecast_tasks import UnverifiedModelError

    hook = FakeS3Hook()
    plan, metrics = trained(hook, "2015-07-31", "r1", scores(0.2, 0.5))
    weights = hook._split(f"{metrics['model_attempt_uri']}/model/weights.npz")
    hook.objects[weights] = b"planted weights"
    with pytest.raises(UnverifiedModelError, match=r"weights\.npz: SHA-256 .* differs from the .* its train job wrote"):
        apply_quality_gate(hook, plan, metrics, 0.0, "r1")
    assert not any(key.startswith("models/") for _, key in hook.objects)   # nothing pinned, no record
    # Negative control: the same run with the file as written is promoted.
    hook.objects[weights] = model_files("r1")["model/weights.npz"]
    assert apply_quality_gate(hook, plan, metrics, 0.0, "r1")["promoted"]


def test_a_model_without_recorded_digests_is_never_promoted():
    from rossmann.forecast_tasks import UnverifiedModelError

    hook = FakeS3Hook()
    plan, metrics = trained(hook, "2015-07-31", "r1", scores(0.2, 0.5))
    manifest = hook._split(manifest_uri(plan["model"]))
    document = json.loads(hook.objects[manifest])
    hook.objects[manifest] = json.dumps({**document, "summary": {}})   # a train output of an earlier release
    with pytest.raises(UnverifiedModelError, match="recorded no SHA-256 digests"):
        apply_quality_gate(hook, plan, metrics, 0.0, "r1")


def test_a_champion_recorded_before_digests_is_handed_on_without_any():
    hook = FakeS3Hook()
    hook.load_string(json.dumps(record(as_of="2015-07-01")), "models/champions/history/2015-07-01.json", "b")
    found = find_champion(hook, plan_run_uris("b", date(2015, 7, 31), "r1"), warm_start=True)
    # The train job then refuses to load it (the model is in the old format too): not scored, no warm start.
    assert found["champion_model_uri"] and found["champion_model_sha256"] == ""


def test_a_run_never_replaces_a_same_date_champion_its_train_job_did_not_score():
    """Two runs for one date: both found no champion and trained. The second gate finds the first one's record for
    the date: its model was never compared with it, so it stops clearly (before: it replaced the record)."""
    hook = FakeS3Hook()
    setups = {run: trained(hook, "2015-07-31", run, scores(challenger, 0.5)) for run, challenger in
              (("r1", 0.20), ("r2", 0.10))}
    assert apply_quality_gate(hook, *setups["r1"], 0.0, "r1")["promoted"]
    winner = f"s3://b/models/champions/2015-07-31/{run_key('r1')}/a-r1"
    with pytest.raises(ScoredChampionError, match=rf"names {winner} \(run r1.*did not score \(it scored no champion\)"):
        apply_quality_gate(hook, *setups["r2"], 0.0, "r2")
    assert hook.json(f"{HISTORY}/2015-07-31.json")["run_id"] == hook.json("s3://b/models/champion.json")["run_id"] \
        == "r1"
    loser = f"models/champions/2015-07-31/{run_key('r2')}/"
    assert not [key for _b, key in hook.objects if key.startswith(loser)]   # not pinned
    # A run that lost to the baseline does not need the comparison: the date's champion forecasts for it.
    plan, metrics = trained(hook, "2015-07-31", "r3", scores(0.7, 0.5))
    assert apply_quality_gate(hook, plan, metrics, 0.0, "r3")["champion_run_id"] == "r1"


def test_compare_and_set_re_decides_on_what_the_winner_wrote():
    from rossmann.outputs import ConcurrentUpdateError, compare_and_set_json

    hook, uri, seen = FakeS3Hook(), "s3://b/models/champion.json", []

    def change(current):
        seen.append(current)
        if len(seen) == 1:   # another writer lands between this read and this write
            hook.load_string(json.dumps({"as_of": "2015-07-31"}), "models/champion.json", "b")
        return {"as_of": "2015-07-30"} if current is None or current["as_of"] <= "2015-07-30" else None

    assert compare_and_set_json(hook, uri, change) is None
    assert seen == [None, {"as_of": "2015-07-31"}] and hook.json(uri) == {"as_of": "2015-07-31"}

    def keeps_losing(current):
        hook.load_string(json.dumps({"n": len(seen)}), "models/champion.json", "b")
        seen.append(current)
        return {"as_of": "2015-08-01"}

    with pytest.raises(ConcurrentUpdateError, match="every one of 5 compare-and-set tries"):
        compare_and_set_json(hook, uri, keeps_losing)


def test_a_gate_rerun_after_its_own_promotion_keeps_it_and_completes_the_pointer():
    """The gate crashed between the record's PUT and the pointer's, and is retried: its own record is kept (not
    refused as a champion it did not score, not written again) and the pointer catches up."""
    hook = FakeS3Hook()
    plan, metrics = trained(hook, "2015-07-31", "r1", scores(0.2, 0.5))
    first = apply_quality_gate(hook, plan, metrics, 0.0, "r1")
    record = hook.objects[("b", "models/champions/history/2015-07-31.json")]
    del hook.objects[("b", "models/champion.json")]             # the crash: the pointer was never written
    again = apply_quality_gate(hook, plan, metrics, 0.0, "r1")
    assert not again["promoted"] and "already is the champion" in again["reason"]
    assert again["champion_model_uri"] == first["champion_model_uri"] and again["forecast_model"] == "champion"
    assert again["champion_model_sha256"] == first["champion_model_sha256"]
    assert hook.objects[("b", "models/champions/history/2015-07-31.json")] == record   # untouched
    assert hook.json("s3://b/models/champion.json") == json.loads(record)


def committed_forecast(hook: FakeS3Hook, plan: dict, forecast_model: str | None) -> None:
    """A committed predict output of the run: its files and a manifest whose summary names what forecast."""
    attempt = f"{plan['predictions']}/attempts/a1"
    files = [f"{attempt}/{name}" for name in ("submission.csv", "report/index.html")]
    for uri in files:
        hook.load_string("content", *reversed(hook._split(uri)))
    summary = {"validation_exp_rmspe": 0.1, "rows": {"test": 1}, "horizon": {"start": "2015-08-01",
                                                                             "end": "2015-09-17"}}
    if forecast_model:
        summary["forecast_model"] = forecast_model
    hook.load_string(json.dumps(manifest_document(plan["predictions"], attempt, files, summary)),
                     *reversed(hook._split(manifest_uri(plan["predictions"]))))


def test_a_naive_fallback_is_published_marked_and_alerted(monkeypatch):
    from rossmann import forecast_tasks

    posted = []
    monkeypatch.setattr(forecast_tasks, "forecast_fallback_alert",
                        lambda details: SimpleNamespace(notify=lambda context: posted.append(details)))
    hook = FakeS3Hook()
    plan = plan_run_uris("b", date(2015, 7, 31), "r1")
    committed_forecast(hook, plan, NAIVE_FALLBACK)
    gate_xcom = {"champion_model_uri": "", "forecast_model": NAIVE_FALLBACK, "fallback_reason": "why not a network"}
    forecast, latest = forecast_tasks.publish_forecast(hook, plan, gate_xcom, "r1")
    assert latest and hook.json(plan["forecast_pointer"])["forecast_model"] == NAIVE_FALLBACK
    assert forecast["model_uri"] == NAIVE_FALLBACK and forecast["fallback_reason"] == "why not a network"
    assert hook.json(plan["forecast_record"])["forecast_model"] == NAIVE_FALLBACK
    assert [alert["fallback_reason"] for alert in posted] == ["why not a network"]
    # A network's forecast posts nothing; a committed forecast of another kind than the gate chose is refused.
    plan = plan_run_uris("b", date(2015, 7, 31), "r2")
    committed_forecast(hook, plan, "network")
    forecast_tasks.publish_forecast(hook, plan, {"champion_model_uri": "s3://b/models/m", "forecast_model":
                                                 "challenger"}, "r2")
    assert len(posted) == 1
    with pytest.raises(RuntimeError, match="clear predict"):
        forecast_tasks.publish_forecast(hook, plan, gate_xcom, "r2")


# --- published forecasts: immutable copies, and the latest decision for a date ---------------------------------

def predicted(hook: FakeS3Hook, plan: dict, attempt_id: str, content: str, forecast_model: str = "network") -> str:
    """A committed predict attempt of the run whose files hold `content`; its URI."""
    attempt = f"{plan['predictions']}/attempts/{attempt_id}"
    names = ("submission.csv", "forecast_quantiles.csv", "report/index.html", "predictions/Split=test/part-0.parquet")
    files = [f"{attempt}/{name}" for name in names]
    for uri in files:
        hook.load_bytes(f"{content} {uri.rsplit('/', 1)[-1]}".encode(), *reversed(hook._split(uri)))
    summary = {"validation_exp_rmspe": 0.1, "rows": {"test": 1}, "forecast_model": forecast_model,
               "horizon": {"start": "2015-08-01", "end": "2015-09-17"}}
    hook.load_string(json.dumps(manifest_document(plan["predictions"], attempt, files, summary)),
                     *reversed(hook._split(manifest_uri(plan["predictions"]))))
    return attempt


def published_bytes(hook: FakeS3Hook, forecast: dict) -> dict[str, bytes]:
    root = hook._split(forecast["published_uri"])[1] + "/"
    return {key[len(root):]: data for (_b, key), data in hook.objects.items() if key.startswith(root)}


def test_a_published_forecast_is_a_hashed_copy_that_a_predict_rerun_never_changes():
    from rossmann import forecast_tasks

    hook = FakeS3Hook()
    plan = plan_run_uris("b", date(2015, 7, 31), "r1")
    attempt = predicted(hook, plan, "p1", "first")
    gate_xcom = {"champion_model_uri": "s3://b/models/m", "forecast_model": "champion",
                 "decided_at": "2015-08-01T00:00:00+00:00"}
    forecast, latest = forecast_tasks.publish_forecast(hook, plan, gate_xcom, "r1")
    assert latest and forecast["published_uri"] == f"s3://b/forecast/published/2015-07-31/{run_key('r1')}/p1"
    pointer, registered = hook.json(plan["forecast_pointer"]), hook.json(plan["forecast_record"])
    for name in ("submission_uri", "report_uri", "predictions_uri", "quantiles_uri"):
        assert pointer[name].startswith(forecast["published_uri"] + "/"), name   # the copy, not runs/
    assert registered["predictions_uri"] == pointer["predictions_uri"] and registered["source_attempt_uri"] == attempt
    before = published_bytes(hook, forecast)
    assert registered["forecast_sha256"] == {path: sha256_hex(data) for path, data in before.items()}
    assert sorted(before) == ["forecast_quantiles.csv", "predictions/Split=test/part-0.parquet",
                              "report/index.html", "submission.csv"]

    # A re-run of predict: the jobs rewrite the attempt's files (here in place), then commit a new attempt and
    # delete the old one. The published copy keeps its bytes, and the pointer names it still.
    for key in [key for _b, key in hook.objects if key.startswith(hook._split(attempt)[1] + "/")]:
        hook.objects[("b", key)] = b"overwritten by a predict re-run"
    with pytest.raises(forecast_tasks.PublishedForecastChangedError, match="changed after it was published"):
        forecast_tasks.publish_forecast(hook, plan, gate_xcom, "r1")     # never re-copied over the published one
    for key in [key for _b, key in hook.objects if key.startswith(hook._split(attempt)[1] + "/")]:
        del hook.objects[("b", key)]
    assert published_bytes(hook, forecast) == before and hook.json(plan["forecast_pointer"]) == pointer
    # Its next publish_forecast publishes the new attempt as a new copy, beside the old one.
    predicted(hook, plan, "p2", "second")
    again, latest = forecast_tasks.publish_forecast(hook, plan, gate_xcom, "r1")
    assert latest and again["published_uri"].endswith("/p2") and published_bytes(hook, forecast) == before
    # Negative control: before the copy, the pointer named the attempt, which the re-run deleted.
    assert not [key for _b, key in hook.objects if key.startswith(hook._split(attempt)[1] + "/")]


def race_one_date(publish_order: list[str]) -> tuple[FakeS3Hook, dict, dict]:
    """Runs A and B for one date both run find_champion (the earlier date's champion C0) before either gate; A's
    gate promotes, then B's loses against C0; then they publish in `publish_order`. Returns the hook, the gates'
    results and the published forecasts by run."""
    from rossmann import forecast_tasks

    hook = FakeS3Hook()
    gate(hook, "2015-07-20", "c0", 0.30)                                         # C0, as of an earlier date
    plans = {run: plan_run_uris("b", date(2015, 7, 31), run) for run in ("A", "B")}
    found = {run: find_champion(hook, plan) for run, plan in plans.items()}
    assert found["A"]["champion_run_id"] == found["B"]["champion_run_id"] == "c0"
    gates = {}
    for run, challenger in (("A", 0.20), ("B", 0.35)):
        scored = scores(challenger, 0.5, 0.30, found[run]["champion_model_uri"])
        plan, metrics = trained(hook, "2015-07-31", run, scored)
        gates[run] = apply_quality_gate(hook, plan, metrics, 0.0, run)
        predicted(hook, plans[run], f"p-{run}", f"forecast of {run} with {gates[run]['champion_model_uri']}")
    published = {run: forecast_tasks.publish_forecast(hook, plans[run], gates[run], run)[0] for run in publish_order}
    return hook, gates, published


@pytest.mark.parametrize("publish_order", [["A", "B"], ["B", "A"]])
def test_a_same_date_race_ends_with_the_winners_champion_published(publish_order):
    hook, gates, published = race_one_date(publish_order)
    winner = f"s3://b/models/champions/2015-07-31/{run_key('A')}/a-A"
    assert gates["A"]["promoted"] and gates["A"]["champion_model_uri"] == winner
    # B lost against the champion it scored (C0), but the date's record names A's model now: B forecasts with it.
    assert not gates["B"]["promoted"] and "champion 0.30000" in gates["B"]["reason"]
    assert gates["B"]["champion_model_uri"] == winner and gates["B"]["champion_run_id"] == "A"
    assert hook.json(f"{HISTORY}/2015-07-31.json")["model_uri"] == winner
    latest = hook.json("s3://b/forecast/latest.json")
    assert latest["model_uri"] == winner and latest["run_id"] == "B"          # B decided last, with the winner's model
    assert {forecast["model_uri"] for forecast in published.values()} == {winner}


def test_an_earlier_decision_published_last_never_moves_latest_back():
    """B's gate decided before A promoted (so it forecast with C0); A publishes, then B: latest.json keeps A's
    forecast, and B's stays registered. Negative control: the as-of date alone would have let B replace it."""
    from rossmann import forecast_tasks
    from rossmann.publication import decision_order

    hook = FakeS3Hook()
    gate(hook, "2015-07-20", "c0", 0.30)
    plans = {run: plan_run_uris("b", date(2015, 7, 31), run) for run in ("A", "B")}
    found = {run: find_champion(hook, plan) for run, plan in plans.items()}
    gates = {}
    for run, challenger in (("B", 0.35), ("A", 0.20)):                          # B's gate first: C0 forecasts
        scored = scores(challenger, 0.5, 0.30, found[run]["champion_model_uri"])
        plan, metrics = trained(hook, "2015-07-31", run, scored)
        gates[run] = apply_quality_gate(hook, plan, metrics, 0.0, run)
        predicted(hook, plans[run], f"p-{run}", run)
    assert gates["B"]["champion_run_id"] == "c0" and gates["A"]["promoted"]
    forecast_tasks.publish_forecast(hook, plans["A"], gates["A"], "A")
    b_forecast, b_latest = forecast_tasks.publish_forecast(hook, plans["B"], gates["B"], "B")
    assert not b_latest and hook.json("s3://b/forecast/latest.json")["run_id"] == "A"
    assert hook.json(plans["B"]["forecast_record"])["run_id"] == "B"          # registered, so it is scored
    assert b_forecast["as_of"] == hook.json("s3://b/forecast/latest.json")["as_of"]   # what `>=` compared
    assert decision_order(b_forecast) < decision_order(hook.json("s3://b/forecast/latest.json"))


def test_a_forecast_decided_before_a_same_date_promotion_it_never_saw_is_not_the_latest():
    """A gate that read the date's record just before another run's promotion landed (and decided later by the
    clock) forecasts with the older champion: at publication the date's record names another model, so latest.json
    stays with that run's forecast."""
    from rossmann import forecast_tasks

    hook = FakeS3Hook()
    gate(hook, "2015-07-20", "c0", 0.30)
    plans = {run: plan_run_uris("b", date(2015, 7, 31), run) for run in ("A", "B")}
    _found, a_gate = gate(hook, "2015-07-31", "A", 0.20, champion_score=0.30)
    predicted(hook, plans["A"], "p-A", "A")
    forecast_tasks.publish_forecast(hook, plans["A"], a_gate, "A")
    stale = {"champion_model_uri": f"s3://b/models/champions/2015-07-20/{run_key('c0')}/a-c0",
             "forecast_model": "champion", "decided_at": "2999-01-01T00:00:00+00:00"}   # "later" by the clock
    predicted(hook, plans["B"], "p-B", "B")
    _forecast, latest = forecast_tasks.publish_forecast(hook, plans["B"], stale, "B")
    assert not latest and hook.json("s3://b/forecast/latest.json")["run_id"] == "A"
