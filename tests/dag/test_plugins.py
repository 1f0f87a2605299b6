"""Unit tests of the pure Airflow-side helpers: run planning, the quality gate, metrics summary, AWS settings."""
from __future__ import annotations

import json
import math
from datetime import date

import pytest
from rossmann.gate import decide_promotion
from rossmann.outputs import train_summary
from rossmann.publication import replaces_latest
from rossmann.sensors import poke_interval_for
from rossmann.spark_submit import aws_environment
from rossmann.uris import pinned_model_uri, plan_run_uris, run_key


def test_run_key_is_storage_safe_and_keeps_distinct_runs_distinct():
    assert run_key("manual__2015-07-31T00:00:00+00:00") == "manual__2015-07-31T00_00_00_00_00"
    assert run_key("backfill__2015-07-30T00:00:00+00:00") != run_key("scheduled__2015-07-30T00:00:00+00:00")
    with pytest.raises(ValueError):
        run_key("///")


def test_plan_is_run_scoped_and_dated():
    plan = plan_run_uris("rossmann", date(2015, 7, 31), "scheduled__2015-07-31T00:00:00+00:00")
    run_root = "s3://rossmann/runs/2015-07-31/scheduled__2015-07-31T00_00_00_00_00"
    assert plan == {
        "as_of": "2015-07-31",
        "raw": "s3://rossmann/raw/2015-07-31",
        "raw_marker": "s3://rossmann/raw/2015-07-31/_SUCCESS",
        "features": f"{run_root}/features",
        "model": f"{run_root}/model",
        "predictions": f"{run_root}/predictions",
        "champion": "s3://rossmann/models/champion.json",
        "champion_models": "s3://rossmann/models/champions/2015-07-31/scheduled__2015-07-31T00_00_00_00_00",
        "forecast_pointer": "s3://rossmann/forecast/latest.json",
    }


def test_forecast_pointer_moves_only_to_the_same_or_a_later_as_of_date():
    current = {"as_of": "2015-07-31", "run_id": "scheduled__2015-07-31"}
    assert replaces_latest("2015-07-31", None)
    assert replaces_latest("2015-08-01", current)
    assert replaces_latest("2015-07-31", current)        # a re-run of the latest date
    assert not replaces_latest("2015-07-30", current)    # a backfill of an earlier date
    assert not replaces_latest("2014-12-31", current)


def test_first_model_is_promoted():
    decision = decide_promotion(0.2, None, 0.0)
    assert decision["promoted"] and decision["champion_val_exp_rmspe"] is None


@pytest.mark.parametrize("candidate, champion, tolerance, promoted", [
    (0.150, 0.150, 0.0, True),     # equal is "not worse"
    (0.149, 0.150, 0.0, True),
    (0.151, 0.150, 0.0, False),
    (0.153, 0.150, 0.05, True),    # within 5 % of the champion
    (0.160, 0.150, 0.05, False),   # 0.160 > 0.1575
    (0.149, 0.150, -0.05, False),  # negative tolerance demands a 5 % improvement: threshold 0.1425
    (0.140, 0.150, -0.05, True),
])
def test_gate_promotes_only_models_that_are_not_worse(candidate, champion, tolerance, promoted):
    decision = decide_promotion(candidate, {"val_exp_rmspe": champion, "model_uri": "s3://b/m"}, tolerance)
    assert decision["promoted"] is promoted
    assert decision["threshold"] == pytest.approx(champion * (1 + tolerance))
    assert decision["candidate_val_exp_rmspe"] == candidate and decision["champion_val_exp_rmspe"] == champion


def test_gate_never_promotes_a_non_finite_score():
    for score in (math.nan, math.inf):
        assert decide_promotion(score, None, 0.0)["promoted"] is False
        assert decide_promotion(score, {"val_exp_rmspe": 0.2}, 0.5)["promoted"] is False


def test_the_committed_attempt_that_is_champion_stays_champion():
    attempt = "s3://b/runs/2015-07-31/r1/model/attempts/20150801T000000Z-aaaa"
    champion = {"val_exp_rmspe": 0.150, "model_uri": "s3://b/models/champions/x", "source_model_uri": attempt,
                "run_id": "r1"}
    for tolerance in (0.0, 0.5):
        decision = decide_promotion(0.150, champion, tolerance, run_id="r1", model_attempt_uri=attempt)
        assert decision["promoted"] is False and "already is the champion" in decision["reason"]


@pytest.mark.parametrize("candidate, tolerance, promoted", [
    (0.150, 0.0, False),   # a tie promotes a new run's model, but not a re-run's
    (0.155, 0.1, False),   # nor does a positive tolerance
    (0.149, 0.0, True),
    (0.149, -0.05, False),  # a negative tolerance still applies
])
def test_a_rerun_of_the_champions_run_must_be_strictly_better(candidate, tolerance, promoted):
    champion = {"val_exp_rmspe": 0.150, "source_model_uri": "s3://b/runs/d/r1/model/attempts/old", "run_id": "r1"}
    rerun = decide_promotion(candidate, champion, tolerance, run_id="r1",
                             model_attempt_uri="s3://b/runs/d/r1/model/attempts/new")
    assert rerun["promoted"] is promoted and "strictly better" in rerun["reason"]
    other_run = decide_promotion(candidate, champion, tolerance, run_id="r2",
                                 model_attempt_uri="s3://b/runs/d/r2/model/attempts/new")
    assert other_run["promoted"] is (candidate <= 0.150 * (1 + tolerance))


def test_pinned_model_uri_is_one_folder_per_attempt():
    champions = "s3://b/models/champions/2015-07-31/r1"
    first = pinned_model_uri(champions, "s3://b/runs/2015-07-31/r1/model/attempts/20150801T000000Z-aaaa/")
    second = pinned_model_uri(champions, "s3://b/runs/2015-07-31/r1/model/attempts/20150801T010000Z-bbbb")
    assert first == f"{champions}/20150801T000000Z-aaaa" and second == f"{champions}/20150801T010000Z-bbbb"


def test_train_summary_extracts_the_gate_inputs():
    metrics = {"best_val_exp_rmspe": 0.18, "best_epoch": 3, "epochs": [{"epoch": 1}] * 4, "epochs_run": 4,
               "stopped_early": True, "mean_samples_per_second": 950.5, "horovod_size": 2, "ranks": [{}, {}]}
    assert train_summary(metrics, "s3://b/m/metrics.json") == {
        "best_val_exp_rmspe": 0.18, "best_epoch": 3, "epochs_run": 4, "stopped_early": True, "samples_per_s": 950.5,
        "horovod_size": 2}


def test_train_summary_names_the_file_when_the_score_is_missing():
    with pytest.raises(ValueError, match="s3://b/m/metrics.json.*best_val_exp_rmspe"):
        train_summary({"loss": 1.0}, "s3://b/m/metrics.json")


def test_poke_interval_scales_with_the_timeout():
    assert poke_interval_for(15) == 5
    assert poke_interval_for(600) == 30
    assert poke_interval_for(6 * 3600) == 300


def test_aws_environment_comes_from_the_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_TEST_S3", json.dumps({
        "conn_type": "aws", "login": "key-id", "password": "s3cr3t",
        "extra": {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-central-1"}}))
    assert aws_environment("test_s3") == {
        "AWS_ACCESS_KEY_ID": "key-id", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "eu-central-1"}


def test_aws_environment_sets_nothing_for_role_based_connections(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_TEST_ROLE", json.dumps({"conn_type": "aws", "extra": {}}))
    assert aws_environment("test_role") == {}
    assert aws_environment(None) == {}
