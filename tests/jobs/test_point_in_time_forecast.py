"""Strict point in time, end to end: train -> predict through spark-submit, on the features of a full snapshot and
of a copy of it in which every value dated after as-of D is changed, give the same forecast and the same validation
score.

tests/jobs/test_point_in_time.py shows it for the prepared features (and, in
test_strict_features_ignore_every_value_dated_after_as_of_and_seed_features_do_not, that the same perturbation does
move the features in `--point-in-time reference` mode, i.e. that it reaches what a time-travelling join reads). The two
drops and their features are that module's (conftest.pit_drops: prepared once, in the session's Spark, by the
function prepare's main() runs); here the train and predict jobs run on local files, so nothing the predict job reads
on its own (the raw drop's test.csv, the baseline's history) can bring a value dated after D back in either.

The train job reads nothing but its --features output (and a champion, none here), so once both drops are shown to
have the same rows, one model trained on them stands for both: the two predict runs then differ only in the drop and
the features they are given.
"""
from __future__ import annotations

import io
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from point_in_time_drops import AS_OF, SPLITS, week_end_of
from rossmann_jobs import storage
from rossmann_jobs.features.point_in_time import STRICT
from rossmann_jobs.model.trust import STORAGE_ROOT_ENV
from testkit.job_process import JobProcess

pytestmark = pytest.mark.slow

JOB_TIMEOUT_S = 600
SHARDS = 2
TRAIN_ARGS = ["--num-proc", "1", "--epochs", "2", "--batch-size", "64", "--learning-rate", "1e-3",
              "--hidden-units", "64,32"]
REL = 1e-6   # float32 round-off


def run_job(job: str, args: list[str], log_path) -> float:
    """Run a job with spark-submit (local[2]); fail with its log's tail unless it exits 0. Returns seconds."""
    started = time.perf_counter()
    process = JobProcess(job, args)
    code = process.wait(JOB_TIMEOUT_S)
    log_path.write_text(process.output)
    assert code == 0, f"{job} exited {code}:\n{process.output[-4000:]}"
    return time.perf_counter() - started


def committed(out: str, name: str) -> bytes:
    return storage.read_bytes(storage.join(storage.committed_uri(out), name))


def predict(model, drop, work) -> dict:
    out = str(work / "predict")
    run_job("predict", ["--model", model, "--features", drop.features, "--raw", drop.raw, "--out", out],
            work / "predict.log")
    return {"submission": pd.read_csv(io.BytesIO(committed(out, "submission.csv"))).sort_values("Id")
            .reset_index(drop=True),
            "summary": storage.read_manifest(out)["summary"]}


@pytest.fixture(scope="module")
def snapshot(pit_drops):
    return pit_drops.snapshot


@pytest.fixture(scope="module")
def changed_files(pit_drops):
    return pit_drops("perturbed", STRICT).files


@pytest.fixture(scope="module")
def forecasts(pit_drops, tmp_path_factory):
    """One model trained on the full drop's features, both forecasts side by side (the jobs mostly wait on start-up:
    JVM, TF, Horovod)."""
    drops = {name: pit_drops(name, STRICT) for name in ("full", "perturbed")}
    works = {name: tmp_path_factory.mktemp(name) for name in drops}
    model = str(works["full"] / "runs" / "train")   # predict loads models from the storage root's runs/ only
    run_job("train", ["--features", drops["full"].features, "--out", model, *TRAIN_ARGS], works["full"] / "train.log")
    with ThreadPoolExecutor(max_workers=len(drops)) as pool, pytest.MonkeyPatch.context() as patch:
        patch.setenv(STORAGE_ROOT_ENV, str(works["full"]))
        predicted = dict(zip(drops, pool.map(lambda name: predict(model, drops[name], works[name]), drops)))
    metrics = json.loads(committed(model, "metrics.json"))
    return {name: {**predicted[name], "splits": drops[name].splits(), "metadata": drops[name].metadata,
                   "metrics": metrics}
            for name in drops}


@pytest.fixture(scope="module")
def full(forecasts):
    return forecasts["full"]


@pytest.fixture(scope="module")
def changed(forecasts):
    return forecasts["perturbed"]


def dated_after(name, row):
    return (week_end_of(row["week"]) if name == "googletrend.csv" else pd.Timestamp(row["Date"]).date()) > AS_OF


def test_the_perturbation_changes_every_file_after_as_of_and_nothing_else(snapshot, changed_files):
    """The two drops differ, and only where the forecast must not look: the comparison below could fail."""
    for name in ("train.csv", "weather.csv", "googletrend.csv"):
        after = [(ours, theirs) for ours, theirs in zip(snapshot[name], changed_files[name]) if dated_after(name, ours)]
        assert after and all(ours != theirs for ours, theirs in after), name
        assert [r for r in snapshot[name] if not dated_after(name, r)] == \
               [r for r in changed_files[name] if not dated_after(name, r)], name
    assert changed_files["test.csv"] == snapshot["test.csv"]
    assert all(dated_after("test.csv", row) for row in snapshot["test.csv"])   # the whole plan lies after D


def test_both_drops_prepare_the_same_rows_for_training_validation_and_the_horizon(full, changed):
    """All the train job reads: equal splits make one model (trained on either) stand for both drops."""
    for split in SPLITS:
        assert len(full["splits"][split]) > 0, split
        pd.testing.assert_frame_equal(changed["splits"][split], full["splits"][split], check_exact=True, obj=split)
    for key in ("row_counts", "vocabularies", "max_sales", "feature_spec", "test_window", "validation_window"):
        assert changed["metadata"][key] == full["metadata"][key], key


def test_forecast_and_validation_score_ignore_every_value_dated_after_as_of(full, changed):
    ours, theirs = full["submission"], changed["submission"]
    assert list(ours.columns) == list(theirs.columns) and "Sales" in ours.columns
    assert ours["Id"].tolist() == theirs["Id"].tolist()
    for column in ours.columns.drop("Id"):    # the model's Sales and the naive seasonal baseline
        np.testing.assert_allclose(theirs[column], ours[column], rtol=REL, atol=0, err_msg=column)
    assert changed["summary"]["validation_exp_rmspe"] == pytest.approx(full["summary"]["validation_exp_rmspe"],
                                                                       rel=REL)
    assert changed["summary"]["rows"] == full["summary"]["rows"]
    assert changed["summary"]["horizon"] == full["summary"]["horizon"]


def test_the_forecast_is_not_degenerate(snapshot, full):
    """A constant or absurd forecast would pass the comparison trivially."""
    plan = pd.DataFrame(snapshot["test.csv"]).astype({"Id": int, "Store": int})
    forecast = full["submission"].merge(plan[["Id", "Store", "Date"]], on="Id", validate="one_to_one")
    assert len(forecast) == len(snapshot["test.csv"]) == full["summary"]["rows"]["test"]
    assert np.isfinite(forecast["Sales"]).all() and (forecast["Sales"] >= 0).all()
    opened = forecast[forecast["Sales"] > 0]
    assert len(opened) > len(forecast) / 2
    assert opened["Sales"].nunique() > len(opened) / 2
    assert opened.groupby("Date")["Sales"].median().nunique() > 1       # varies across days
    stores = opened["Store"].nunique()
    assert stores > 1 and opened.groupby("Store")["Sales"].median().nunique() == stores   # and across stores

    history = pd.DataFrame(snapshot["train.csv"]).astype({"Store": int, "Sales": int})
    history = history[(history["Date"].map(lambda d: pd.Timestamp(d).date()) <= AS_OF) & (history["Sales"] > 0)]
    for store, sales in opened.groupby("Store")["Sales"]:
        known = history.loc[history["Store"] == store, "Sales"].median()
        assert known / 3 < sales.median() < known * 3, (store, sales.median(), known)
    assert full["metrics"]["epochs_run"] == 2 and np.isfinite(full["metrics"]["best_val_exp_rmspe"])
