"""End-to-end tests of the train job through spark-submit: 2 Horovod ranks on local[2], real S3 (moto) and disk.

The S3 run is the chain on S3: synthetic raw drop -> prepare (run_prepare, what prepare's main() runs, in the
tests' Spark session: its spark-submit on S3 is test_prepare_job's) -> train job. Each module fixture pays Horovod's
start-up (~1 min) once and feeds several assertions. A rank killed mid-training and the re-run that resumes from its
checkpoint are tested through Airflow on the standalone cluster (tests/dag/test_cluster_e2e.py: the task's first try
fails fast, its retry resumes from the next epoch): the job-side copy of that test is gone to keep the suite short.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
import uuid
from datetime import date

import numpy as np
import pandas as pd
import pytest

from rossmann_jobs import storage
from rossmann_jobs.features.spec import FEATURE_COLS, LABEL_COL
from rossmann_jobs.model import store as model_store
from rossmann_jobs.model.forward_pass import ForwardPass
from rossmann_jobs.output_layout import METADATA_FILE, VALIDATION_DIR
from tests.jobs.conftest import JOBS_BIN, REPO_ROOT
from tests.jobs.listeners import ListenerSampler, is_loopback, reachable_from_outside

pytestmark = pytest.mark.slow

JOB_TIMEOUT_S = 900
AS_OF, SHARDS = "2015-07-31", 4
# The end-to-end DAG tests' configuration (tests/dag/stack_helpers.py SMALL_RUN_CONF, 10 stores): the model must learn
# in it. num_proc stays at its default, local[2]'s 2 task slots. Its 2 epochs of 256-row batches (~30 steps, still
# warming up) stay above the naive baseline; 6 epochs of 64-row batches (~350 steps) beat it.
# (Scoring a champion on the challenger's rows is covered by test_gate_scores.py and by the DAG e2e backfill.)
E2E_STORES, E2E_TRAIN_ARGS = 10, ["--epochs", "2", "--batch-size", "256", "--learning-rate", "0.001"]


def spark_submit(job: str, args: list[str], log_path, extra_env: dict[str, str] | None = None):
    """Run a job as the DAG does; returns (exit code, log text, seconds, the ListenerSampler that watched its sockets).

    As in the embedded stack (scripts/stack/stack_airflow.py), SPARK_LOCAL_IP keeps Spark's own servers on
    loopback; Horovod's are the job's (training/network.py)."""
    env = {**os.environ, "PATH": f"{JOBS_BIN}:{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
           "SPARK_LOCAL_IP": "127.0.0.1", **(extra_env or {})}
    started = time.perf_counter()
    with open(log_path, "w") as log:
        process = subprocess.Popen([str(JOBS_BIN / "spark-submit"), "--master", "local[2]", "--conf",
                                    "spark.ui.enabled=false", str(REPO_ROOT / "rossmann_jobs" / job), *args],
                                   stdout=log, stderr=subprocess.STDOUT, env=env, cwd=log_path.parent)
        sampler = ListenerSampler(process.pid, watch=("horovod.spark.task.gloo_exec_fn",))
        try:
            code = process.wait(timeout=JOB_TIMEOUT_S)
        finally:
            if process.poll() is None:
                process.kill()
            sampler.stop()
    return code, log_path.read_text(), time.perf_counter() - started, sampler


def committed_json(out: str, name: str) -> dict:
    return storage.read_json(storage.join(storage.committed_uri(out), name))


# --- synth -> prepare -> train on S3 ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3_run(s3_server, spark, tmp_path_factory):
    import boto3

    from rossmann_jobs.prepare import run_prepare
    from rossmann_jobs.synth.cli import generate
    from rossmann_jobs.synth.dataset import SynthConfig

    work = tmp_path_factory.mktemp("s3-run")
    bucket = f"train-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=bucket)
    raw, features, out = (f"s3://{bucket}/raw/{AS_OF}", f"s3://{bucket}/runs/{AS_OF}/features",
                          f"s3://{bucket}/runs/{AS_OF}/train")
    generate(raw, SynthConfig(stores=E2E_STORES, seed=11), truth_uri=f"s3://{bucket}/truth/{AS_OF}.json")
    run_prepare(spark, raw, features, date.fromisoformat(AS_OF), num_shards=SHARDS)
    metadata = committed_json(features, METADATA_FILE)
    code, log, seconds, sampler = spark_submit("train.py", ["--features", features, "--out", out, *E2E_TRAIN_ARGS],
                                               work / "train.log")
    return {"code": code, "log": log, "seconds": seconds, "sockets": sampler.seen,
            "rank_connections": sampler.connected, "features": features, "out": out, "metadata": metadata,
            "root": f"s3://{bucket}",
            "train_rows": metadata["row_counts"]["train"], "validation_rows": metadata["row_counts"]["validation"]}


def test_job_commits_model_metrics_and_plot(s3_run):
    assert s3_run["code"] == 0, s3_run["log"][-4000:]
    files = set(storage.read_manifest(s3_run["out"])["files"])
    assert {"model/weights.npz", "model/artifact.json", "metrics.json", "training_curves.png"} <= files
    assert "model/model.h5" not in files   # no whole-model file: models are params + weights, never code
    png = storage.read_bytes(storage.join(storage.committed_uri(s3_run["out"]), "training_curves.png"))
    assert png.startswith(b"\x89PNG")


def test_nothing_of_the_training_run_listens_beyond_loopback(s3_run):
    """Horovod's driver and task services, the Gloo rendezvous and Gloo's own sockets bind loopback only (the
    embedded stack's ROSSMANN_HOROVOD_NICS default); tests/jobs/test_horovod_network.py shows the same check
    catching Horovod's unbound servers."""
    assert s3_run["code"] == 0, s3_run["log"][-4000:]
    assert "Horovod binds interface lo only (127.0.0.1 on the driver" in s3_run["log"]
    # The sampler saw Horovod's servers in the driver process: its driver service and the Gloo rendezvous (besides
    # the JVM's and the Python workers', where the task services run).
    owners = [name for _, _, name in s3_run["sockets"]]
    assert sum("rossmann_jobs/train.py" in name for name in owners) >= 2, sorted(s3_run["sockets"])
    assert reachable_from_outside(s3_run["sockets"]) == [], sorted(s3_run["sockets"])
    # Gloo's listeners in the ranks last only until the peer connects, so the sampler may or may not catch one
    # (any it caught is checked above). Gloo binds the interface's address and hands it to the peers, so the
    # ranks' connections, which last the whole training, show which address that was: each end on loopback.
    gloo = [c for c in s3_run["rank_connections"] if "horovod.spark.task.gloo_exec_fn" in c[2]]
    assert gloo, sorted(s3_run["rank_connections"])
    assert [c for c in gloo if not (is_loopback(c[0]) and is_loopback(c[1]))] == [], sorted(gloo)


def test_both_ranks_trained_on_disjoint_shards_that_cover_every_row(s3_run):
    logged = {int(rank): (int(files), int(rows)) for rank, files, rows in
              re.findall(r"rank (\d)/2: train shard (\d+) files, (\d+) rows", s3_run["log"])}
    assert set(logged) == {0, 1}                          # num_proc defaulted to local[2]'s 2 task slots
    assert sum(rows for _files, rows in logged.values()) == s3_run["train_rows"]
    assert (f"allreduced: {s3_run['train_rows']} train rows, {s3_run['validation_rows']} validation rows over "
            "2 ranks") in s3_run["log"]
    metrics = committed_json(s3_run["out"], "metrics.json")
    assert metrics["horovod_size"] == 2 and metrics["train_rows_total"] == s3_run["train_rows"]
    files = [set(rank["train_files"]) for rank in metrics["ranks"]]
    assert not files[0] & files[1] and len(files[0] | files[1]) == SHARDS


def test_metrics_show_per_epoch_progress(s3_run):
    metrics = committed_json(s3_run["out"], "metrics.json")
    epochs = metrics["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2]
    for epoch in epochs:
        assert epoch["train_samples"] >= s3_run["train_rows"]
        assert epoch["validation_samples"] == s3_run["validation_rows"]
        assert all(math.isfinite(epoch[k]) and epoch[k] > 0 for k in
                   ("train_loss", "val_loss", "train_exp_rmspe", "val_exp_rmspe", "samples_per_second"))
        assert 0 <= epoch["data_wait_share"] < 1
    best = min(epochs, key=lambda e: e["val_exp_rmspe"])
    assert (metrics["best_epoch"], metrics["best_val_exp_rmspe"]) == (best["epoch"], best["val_exp_rmspe"])
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ INFO \[rossmann.train rank 0/2\] epoch 2/2: loss",
                     s3_run["log"])


def test_the_model_learns_in_the_end_to_end_configuration(s3_run):
    """The output starts at the train split's mean log(Sales) and the batch normalization at the split's statistics:
    without them this configuration ended with validation exp-RMSPE ~24 (a saturated sigmoid)."""
    metrics = committed_json(s3_run["out"], "metrics.json")
    scores = metrics["gate_scores"]
    assert scores["validation_rows"] == s3_run["validation_rows"] > 0
    assert scores["champion"] is None and scores["champion_model_uri"] is None
    # The gate's Spark-side exp-RMSPE of the committed model is the training loop's best validation score.
    assert scores["challenger"] == pytest.approx(metrics["best_val_exp_rmspe"], rel=1e-3)
    assert scores["challenger"] < 0.5, metrics["epochs"]
    assert 0 < scores["baseline"] < 0.5
    assert storage.read_manifest(s3_run["out"])["summary"]["gate_scores"] == scores


def test_artifact_alone_loads_and_reproduces_the_best_validation_score(s3_run, tmp_path):
    import pyarrow.parquet as pq

    storage.download_dir(storage.join(storage.committed_uri(s3_run["out"]), "model"), str(tmp_path))
    artifact = json.loads((tmp_path / "artifact.json").read_text())
    assert artifact["feature_order"] == FEATURE_COLS
    assert artifact["max_sales"] == s3_run["metadata"]["max_sales"]
    assert artifact["vocabularies"] == s3_run["metadata"]["vocabularies"]
    assert artifact["label_transform"] == "log" and artifact["horovod_size"] == 2
    assert artifact["features_uri"] == s3_run["features"]

    # Checked against the digests the job committed.
    source = model_store.open_model(s3_run["out"], root=s3_run["root"])
    model = ForwardPass(source.artifact, source.weights_bytes(), source.attempt)   # what predict and the gate load
    validation_files = [f for f in storage.list_files(storage.join(storage.committed_uri(s3_run["features"]),
                                                                   VALIDATION_DIR)) if f.endswith(".parquet")]
    frames = []
    for uri in validation_files:
        filesys, path = storage.filesystem(uri)
        frames.append(pq.read_table(path, filesystem=filesys))
    rows = pd.DataFrame({col: np.concatenate([f[col].to_numpy() for f in frames]) for col in FEATURE_COLS})
    log_sales = np.concatenate([f[LABEL_COL].to_numpy() for f in frames])
    predicted = model(rows)
    assert predicted.shape == (s3_run["validation_rows"],) and np.all(np.isfinite(predicted))
    rmspe = math.sqrt(np.mean((1 - np.exp(predicted - log_sales)) ** 2))
    assert rmspe == pytest.approx(artifact["best_val_exp_rmspe"], rel=1e-3)


# --- the season backtest: the recipe a year earlier -------------------------------------------------------------

def prepared_rows(features: str) -> pd.DataFrame:
    """Every prepared train and validation row (all dated <= the as-of date): StoreId, Date, DayOfWeek, Promo and
    the label."""
    import pyarrow.parquet as pq

    attempt = storage.committed_uri(features)
    frames = []
    for split in ("train", VALIDATION_DIR):
        for uri in storage.parquet_files(storage.join(attempt, split)):
            filesys, path = storage.filesystem(uri)
            frames.append(pq.read_table(path, filesystem=filesys,
                                        columns=["StoreId", "Date", "DayOfWeek", "Promo", LABEL_COL]).to_pandas())
    rows = pd.concat(frames, ignore_index=True)
    rows["Date"] = pd.to_datetime(rows["Date"]).dt.date
    return rows


@pytest.fixture(scope="module")
def season_backtest(s3_run, tmp_path_factory):
    out = f"{s3_run['root']}/runs/{AS_OF}/season_backtest"
    code, log, _seconds, _sampler = spark_submit(
        "train.py", ["--features", s3_run["features"], "--out", out, "--season-backtest", *E2E_TRAIN_ARGS],
        tmp_path_factory.mktemp("season-backtest") / "train.log")
    return {"code": code, "log": log, "out": out}


def test_the_season_backtest_trains_up_to_a_year_earlier_and_scores_the_year_earlier_horizon(s3_run,
                                                                                            season_backtest):
    """Origin D - 364: trained on the rows up to D - 412, its epoch chosen on (D - 412, D - 364], scored against the
    naive baseline fitted up to D - 364 on (D - 364, D - 316], each count and the baseline's score recomputed
    independently from the prepared rows."""
    from tests.jobs.predict_fixtures import expected_baseline

    assert season_backtest["code"] == 0, season_backtest["log"][-4000:]
    summary = storage.read_manifest(season_backtest["out"])["summary"]
    facts = summary["season_backtest"]
    assert facts["available"] is True
    assert (facts["origin"], facts["train_end"], facts["window_start"], facts["window_end"]) == (
        "2014-08-01", "2014-06-14", "2014-08-02", "2014-09-18")
    rows = prepared_rows(s3_run["features"])
    origin, train_end, window_end = (date.fromisoformat(facts[key]) for key in ("origin", "train_end", "window_end"))
    train = rows[rows["Date"] <= train_end]
    choose = rows[(rows["Date"] > train_end) & (rows["Date"] <= origin)]
    window = rows[(rows["Date"] > origin) & (rows["Date"] <= window_end)]
    assert facts["rows"] == {"train": len(train), "validation": len(choose), "window": len(window)}
    metrics = committed_json(season_backtest["out"], "metrics.json")
    # Nothing dated after the year-earlier origin was trained on; the epoch was chosen before the window.
    assert metrics["train_rows_total"] == len(train) and metrics["validation_rows_total"] == len(choose)
    assert facts["scored_rows"] == len(window) and metrics["gate_scores"]["champion"] is None
    history = rows[rows["Date"] <= origin]
    baseline = expected_baseline(history, window.reset_index(drop=True), origin).to_numpy()
    actual = np.exp(window[LABEL_COL].astype(float).to_numpy())
    assert facts["baseline"] == pytest.approx(math.sqrt(np.mean(((actual - baseline) / actual) ** 2)), rel=1e-4)
    assert 0 < facts["challenger"] < 1 and math.isfinite(facts["challenger"])
    assert "season backtest: origin 2014-08-01" in season_backtest["log"]


def test_a_season_backtest_without_enough_history_commits_that_it_cannot_run(s3_run, spark):
    """Where the history before the year-earlier origin is too short, the backtest commits why, trains nothing,
    and the gate then decides on the recent window alone (tests/dag/test_gate.py)."""
    from rossmann_jobs import train

    out = f"{s3_run['root']}/runs/{AS_OF}/season_backtest_short"
    manifest = train.run(spark, train.parse_args(["--features", s3_run["features"], "--out", out,
                                                  "--season-backtest", "--backtest-min-train-days", "100000"]))
    facts = manifest["summary"]["season_backtest"]
    assert facts["available"] is False and "too short a history" in facts["reason"]
    assert not [name for name in manifest["files"] if name.startswith("model/")]


def test_the_season_backtest_reads_nothing_dated_after_its_year_earlier_horizon(s3_run, spark):
    """The future of the backtest perturbed: every prepared row dated after the year-earlier horizon's end gets
    another label and promotion. The backtest's three splits are the same rows, value for value."""
    from dataclasses import replace

    from pyspark.sql import functions as F

    from rossmann_jobs.training import season_backtest
    from rossmann_jobs.training.feature_set import load_feature_set

    features = load_feature_set(s3_run["features"])
    as_of = date.fromisoformat(features.metadata["as_of"])
    window_end = season_backtest.BacktestWindows.for_as_of(as_of).window_end
    root = f"{s3_run['root']}/runs/{AS_OF}/season_backtest_perturbed"
    later = F.col("Date").cast("date") > F.lit(window_end)
    perturbed_files, perturbed_rows = {}, 0
    for split, files in (("train", features.train_files), ("validation", features.validation_files)):
        rows = spark.read.parquet(*[storage.spark_uri(uri) for uri in files])
        perturbed_rows += rows.filter(later).count()
        types = dict(rows.dtypes)
        rows = rows.withColumns({
            LABEL_COL: F.when(later, F.col(LABEL_COL) + 0.5).otherwise(F.col(LABEL_COL)).cast(types[LABEL_COL]),
            "Promo": F.when(later, 1 - F.col("Promo")).otherwise(F.col("Promo")).cast(types["Promo"])})
        rows.write.mode("overwrite").parquet(storage.spark_uri(f"{root}/input/{split}"))
        perturbed_files[split] = storage.parquet_files(f"{root}/input/{split}")
    assert perturbed_rows > 1000   # the perturbation reaches most of the year before the as-of date
    perturbed = replace(features, train_files=perturbed_files["train"],
                        validation_files=perturbed_files["validation"])

    def splits(feature_set, out: str) -> dict[str, pd.DataFrame]:
        views = season_backtest.prepare_views(spark, feature_set, out, as_of)
        assert isinstance(views, season_backtest.BacktestViews), views
        files = {"train": views.training.train_files, "validation": views.training.validation_files,
                 "window": views.scoring.validation_files}
        return {name: spark.read.parquet(*[storage.spark_uri(uri) for uri in uris]).toPandas()
                .sort_values(["StoreId", "Date"]).reset_index(drop=True) for name, uris in files.items()}

    clean, moved = splits(features, f"{root}/clean"), splits(perturbed, f"{root}/moved")
    for name in season_backtest.SPLITS:
        assert len(clean[name]) > 0
        pd.testing.assert_frame_equal(clean[name], moved[name], check_like=True)
