"""End-to-end tests of the predict job on a tiny generated features output and a small real Keras model."""
from __future__ import annotations

import base64
import glob
import io
import math
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pyspark
import pytest

import predict_fixtures
from conftest import JOBS_BIN, REPO_ROOT
from report_html import ReportPage
from rossmann_jobs import predict, spark_session, storage
from rossmann_jobs.features.drop_verification import check_file_against_metadata
from rossmann_jobs.features.spec import FEATURE_COLS, LABEL_COL
from rossmann_jobs.forecast.baseline import BASELINE_COL
from rossmann_jobs.forecast.prepared_checks import ForecastInputError
from rossmann_jobs.model.trust import STORAGE_ROOT_ENV
from rossmann_jobs.output_layout import REPORT_PAGE

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HAS_S3A = bool(glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-aws-*.jar")))


def model_log_sales(model, frame: pd.DataFrame) -> np.ndarray:
    return model.predict({c: frame[c].to_numpy().reshape(-1, 1) for c in FEATURE_COLS}, verbose=0).reshape(-1)


def read_predictions(attempt: str, split: str) -> pd.DataFrame:
    files = [f for f in storage.list_files(storage.join(attempt, "predictions", f"split={split}"))
             if f.endswith(".parquet")]
    return pd.concat([pq.read_table(io.BytesIO(storage.read_bytes(f))).to_pandas() for f in files],
                     ignore_index=True)


def committed_inputs(root: str, test: pd.DataFrame, validation: pd.DataFrame,
                     train: pd.DataFrame | None = None) -> SimpleNamespace:
    """A committed features output, the raw drop's test.csv and a committed model for it under root."""
    features = predict_fixtures.write_features(storage.join(root, "features"), test, validation, train=train)
    raw = predict_fixtures.write_raw_test(storage.join(root, "raw"), test)
    model = predict_fixtures.build_model(features.vocabularies)
    model_uri = storage.join(root, "runs", "2015-07-31", "r", "model")   # the storage root's runs/ (root: root)
    predict_fixtures.write_model(model_uri, features.vocabularies, features.uri, model=model)
    return SimpleNamespace(root=root, features=features, raw=raw, model=model, model_uri=model_uri)


def run_job(spark, inputs: SimpleNamespace, **report_inputs) -> SimpleNamespace:
    out_uri = storage.join(inputs.root, "out")
    manifest = predict.run_predict(spark, inputs.model_uri, inputs.features.uri, out_uri, raw_uri=inputs.raw,
                           **report_inputs)
    attempt = storage.committed_uri(out_uri)
    return SimpleNamespace(
        **vars(inputs), manifest=manifest, attempt=attempt,
        submission=pd.read_csv(io.BytesIO(storage.read_bytes(storage.join(attempt, "submission.csv")))),
        test_predictions=read_predictions(attempt, "test"),
        validation_predictions=read_predictions(attempt, "validation"))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    test, validation = predict_fixtures.make_frames(days=8, blank_open=3)
    root = str(tmp_path_factory.mktemp("predict-job"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STORAGE_ROOT_ENV, root)   # the jobs and this module's tests load models under root only
        yield committed_inputs(root, test, validation, predict_fixtures.make_train())


@pytest.fixture(scope="module")
def job(spark, inputs):
    """One predict run (Spark workers start TF and load the model: minutes on a busy 2-core machine), with the
    report's inputs of a DAG run: the run's trained model and a scores summary holding one forecast scored by the
    as-of date and one scored with a later drop."""
    as_of = predict_fixtures.TEST_START - timedelta(days=1)
    scores = storage.join(inputs.root, "scores")
    storage.write_json(storage.join(scores, "summary.json"), {"forecasts": {
        key: {"as_of": str(as_of - timedelta(days=back)), "run_id": f"run_{key}", "status": "scored",
              "scoring_date": str(scored), "days_scored": 2, "rows": 20, "model_exp_rmspe": 0.123456,
              "baseline_exp_rmspe": 0.2}
        for key, back, scored in (("known", 5, as_of), ("later", 3, as_of + timedelta(days=1)))}})
    return run_job(spark, inputs, trained_model_uri=inputs.model_uri, scores_uri=scores,
                   gate_decision="promoted: beats the naive baseline")


@pytest.mark.slow
def test_submission_has_exactly_one_row_per_test_id_sorted(job):
    submission, test = job.submission, job.features.test
    assert list(submission.columns) == ["Id", "Sales"]
    assert len(submission) == len(test)
    assert submission["Id"].tolist() == sorted(test["Id"].tolist())
    assert submission["Id"].is_unique


@pytest.mark.slow
def test_forecast_quantiles_csv_has_one_monotone_row_per_test_id(job):
    """P10 <= P50 <= P90 on every row, 0 on closed days, the forecast times the validation residual quantiles of
    the row's lead week (the summary's table); the baseline's quantiles never cross either."""
    quantiles = pd.read_csv(io.BytesIO(storage.read_bytes(storage.join(job.attempt, "forecast_quantiles.csv"))))
    test = job.features.test
    assert list(quantiles.columns) == ["Id", "Date", "Store", "P10", "P50", "P90"]
    assert quantiles["Id"].tolist() == sorted(test["Id"].tolist())
    merged = quantiles.merge(test[["Id", "StoreId", "Date", "Open"]].astype({"Date": str}), on="Id",
                             validate="one_to_one")
    assert (merged["Store"] == merged["StoreId"]).all() and (merged["Date_x"] == merged["Date_y"]).all()
    values = quantiles[["P10", "P50", "P90"]].to_numpy()
    assert (np.diff(values, axis=1) >= 0).all()
    closed = merged["Open"].eq(0).fillna(False).astype(bool).to_numpy()
    assert (values[closed] == 0).all() and (values[~closed, 0] > 0).all()
    assert (values[~closed, 2] > values[~closed, 0]).all()
    summary = job.manifest["summary"]["quantiles"]
    assert summary["levels"] == [0.1, 0.5, 0.9]
    table = summary["log_residual_quantiles_by_lead_week"]
    got = job.test_predictions.assign(Date=job.test_predictions["Date"].astype(str))
    for row in got[got["OpenStatus"] != "closed"].itertuples():
        expected = [row.SalesForecast * math.exp(q) for q in table[str(row.LeadWeek)]]
        assert [row.SalesP10, row.SalesP50, row.SalesP90] == pytest.approx(expected, rel=1e-5)
        assert row.SalesP50 == pytest.approx(row.SalesForecast, rel=1e-9)   # centred on the point forecast
    assert set(got["LeadWeek"]) == {1, 2}      # 8 horizon days after the as-of date
    baseline = got[["SalesBaselineP10", "SalesBaselineP50", "SalesBaselineP90"]].to_numpy()
    assert (np.diff(baseline, axis=1) >= 0).all() and (baseline[got["OpenStatus"] == "closed"] == 0).all()
    # 48 validation rows with random lead days: too few for any week alone, all pooled.
    assert sum(summary["validation_rows_by_lead_week"].values()) == len(job.features.validation)
    assert summary["pooled_lead_weeks"]


@pytest.mark.slow
def test_closed_rows_are_zero_and_open_rows_finite_and_positive(job):
    merged = job.submission.merge(job.features.test[["Id", "Open"]], on="Id", validate="one_to_one")
    closed = merged["Open"].eq(0).fillna(False).astype(bool)
    assert closed.sum() > 0 and (~closed).sum() > 0
    assert (merged.loc[closed, "Sales"] == 0).all()
    open_sales = merged.loc[~closed, "Sales"]
    assert np.isfinite(open_sales).all() and (open_sales > 0).all()


@pytest.mark.slow
def test_forecasts_are_the_models_predictions_for_the_right_rows(job):
    test = job.features.test
    expected = pd.DataFrame({"Id": test["Id"], "expected": np.exp(model_log_sales(job.model, test))})
    got = job.test_predictions.merge(expected, on="Id", validate="one_to_one")
    forecast = got["OpenStatus"] != "closed"
    np.testing.assert_allclose(got.loc[forecast, "SalesForecast"], got.loc[forecast, "expected"], rtol=1e-4)
    # The submission is the job's forecast rounded to cents. Against Keras' forecast it can be off by more than a
    # cent: the forward pass agrees to about 1e-6 relative (rtol 1e-4 above), 0.02 at 14,000.
    rounded = job.submission.merge(got[["Id", "SalesForecast"]], on="Id").merge(test[["Id", "Open"]], on="Id")
    is_open = rounded["Open"].ne(0).fillna(True).astype(bool)
    np.testing.assert_allclose(rounded.loc[is_open, "Sales"], rounded.loc[is_open, "SalesForecast"], rtol=0,
                               atol=0.0051)

    validation = job.features.validation
    expected_val = validation[["StoreId", "Date"]].assign(expected=np.exp(model_log_sales(job.model, validation)),
                                                          actual=np.exp(validation[LABEL_COL].astype(float)))
    got_val = job.validation_predictions.merge(expected_val, on=["StoreId", "Date"], validate="one_to_one")
    assert len(got_val) == len(validation)
    np.testing.assert_allclose(got_val["SalesForecast"], got_val["expected"], rtol=1e-4)
    np.testing.assert_allclose(got_val["SalesActual"], got_val["actual"], rtol=1e-5)


@pytest.mark.slow
def test_test_predictions_carry_the_naive_seasonal_baseline(job):
    """Fitted on the prepared rows of the 365 days up to the as-of date (train + validation), independently
    recomputed; closed days 0 like the model's forecast; validation rows have none."""
    test, validation = job.features.test, job.features.validation
    as_of = predict_fixtures.TEST_START - timedelta(days=1)
    history = pd.concat([job.features.train, validation], ignore_index=True)
    assert history["Date"].min() <= as_of - timedelta(days=365)   # some train rows lie before the window
    expected = predict_fixtures.expected_baseline(history, test, as_of)
    assert not np.allclose(expected, predict_fixtures.expected_baseline(validation, test, as_of))
    got = job.test_predictions.merge(pd.DataFrame({"Id": test["Id"], "expected": expected}), on="Id",
                                     validate="one_to_one")
    closed = got["OpenStatus"] == "closed"
    assert closed.any() and (~closed).any()
    assert (got.loc[closed, BASELINE_COL] == 0).all()
    np.testing.assert_allclose(got.loc[~closed, BASELINE_COL], got.loc[~closed, "expected"], rtol=1e-5)
    assert got.loc[~closed, BASELINE_COL].nunique() > 3   # the per-key medians, not one fallback value
    assert job.validation_predictions[BASELINE_COL].isna().all()
    summary = job.manifest["summary"]
    assert summary["as_of"] == as_of.isoformat() and summary["raw"] == job.raw
    assert summary["horizon"] == {"start": str(test["Date"].min()), "end": str(test["Date"].max())}


@pytest.mark.slow
def test_summary_accounts_for_every_row_and_blank_open(job):
    test = job.features.test
    closed = int(test["Open"].eq(0).fillna(False).sum())
    rows = job.manifest["summary"]["rows"]
    assert rows == {"test": len(test), "forecast": len(test) - closed, "closed": closed,
                    "blank_open": int(test["Open"].isna().sum()), "validation": len(job.features.validation)}
    assert rows["blank_open"] == 3
    blank_ids = set(test.loc[test["Open"].isna(), "Id"])
    blank = job.test_predictions[job.test_predictions["Id"].isin(blank_ids)]
    assert set(blank["OpenStatus"]) == {"open_blank"} and (blank["SalesForecast"] > 0).all()


@pytest.mark.slow
def test_validation_rmspe_matches_an_independent_computation(job):
    validation = job.features.validation
    actual = np.exp(validation[LABEL_COL].astype(float).to_numpy())
    forecast = np.exp(model_log_sales(job.model, validation).astype(float))
    expected = math.sqrt(np.mean(((actual - forecast) / actual) ** 2))
    assert job.manifest["summary"]["validation_exp_rmspe"] == pytest.approx(expected, rel=1e-4)


@pytest.mark.slow
def test_report_is_one_self_contained_page(job):
    page = ReportPage()
    page.feed(storage.read_bytes(storage.join(job.attempt, REPORT_PAGE)).decode("utf-8"))
    text = "".join(page.text)
    # gate comparison and training curves of the trained model, 3 validation/horizon plots, the fan chart,
    # accuracy history
    assert len(page.images) == 7
    assert "P10-P90 fan" in text and "lead weeks pooled with neighbours (too few rows)2: weeks 1-3" in text
    for source in page.images:
        assert source.startswith("data:image/png;base64,"), "an image that is not embedded would not open from S3"
        png = base64.b64decode(source.split(",", 1)[1])
        assert png.startswith(PNG_SIGNATURE) and len(png) > 5000
    assert f"{job.manifest['summary']['validation_exp_rmspe']:.4f}" in text
    assert "promoted: beats the naive baseline" in text and "none as of the date" in text
    assert "run_known" in text and "run_later" not in text, "only scores known by the as-of date"
    # The fixture's drop had no manifest: the report says so (and the summary records it).
    assert "raw dropNOT verified: the raw files are not verified against a manifest" in text
    assert job.manifest["summary"]["drop_verified"] is False


@pytest.mark.slow
def test_commit_lists_all_outputs(job):
    files = job.manifest["files"]
    assert "submission.csv" in files and "forecast_quantiles.csv" in files
    assert [f for f in files if f.startswith("report/")] == [REPORT_PAGE]
    assert any(f.startswith("predictions/split=test/") and f.endswith(".parquet") for f in files)
    assert any(f.startswith("predictions/split=validation/") and f.endswith(".parquet") for f in files)


@pytest.mark.slow
def test_without_a_model_the_naive_seasonal_fallback_is_the_forecast(inputs, spark, tmp_path):
    """--model "" (the gate's fallback): every open row's forecast is the naive seasonal baseline fitted up to the
    as-of date, the validation window is forecast by the same baseline fitted before it (its residuals calibrate
    the quantiles, P50 = the forecast), and the summary and the report say that the fallback forecast."""
    out_uri = str(tmp_path / "out")
    manifest = predict.run_predict(spark, "", inputs.features.uri, out_uri, raw_uri=inputs.raw,
                                   trained_model_uri=inputs.model_uri,
                                   gate_decision="not promoted: loses to the naive baseline")
    attempt = storage.committed_uri(out_uri)
    summary = manifest["summary"]
    assert summary["forecast_model"] == "naive-seasonal" and summary["model"] == "naive-seasonal"
    test, validation = inputs.features.test, inputs.features.validation
    as_of = predict_fixtures.TEST_START - timedelta(days=1)
    history = pd.concat([inputs.features.train, validation], ignore_index=True)
    expected = predict_fixtures.expected_baseline(history, test, as_of)
    got = read_predictions(attempt, "test").merge(pd.DataFrame({"Id": test["Id"], "expected": expected}), on="Id",
                                                  validate="one_to_one")
    open_rows = got["OpenStatus"] != "closed"
    np.testing.assert_allclose(got.loc[open_rows, "SalesForecast"], got.loc[open_rows, "expected"], rtol=1e-5)
    np.testing.assert_allclose(got.loc[open_rows, "SalesP50"], got.loc[open_rows, "SalesForecast"], rtol=1e-6)
    assert (got.loc[open_rows, "SalesP10"] < got.loc[open_rows, "SalesP90"]).all()
    assert (got.loc[~open_rows, "SalesForecast"] == 0).all()
    submission = pd.read_csv(io.BytesIO(storage.read_bytes(storage.join(attempt, "submission.csv"))))
    merged = submission.merge(got[["Id", "SalesForecast"]], on="Id", validate="one_to_one")
    np.testing.assert_allclose(merged["Sales"], merged["SalesForecast"], rtol=1e-5)
    # The validation window forecast by the baseline fitted on the rows before it only (here: the train rows).
    window_start = validation["Date"].min()
    expected_val = predict_fixtures.expected_baseline(inputs.features.train, validation,
                                                      window_start - timedelta(days=1))
    got_val = read_predictions(attempt, "validation").merge(
        validation[["StoreId", "Date"]].assign(expected=expected_val.to_numpy()), on=["StoreId", "Date"],
        validate="one_to_one")
    np.testing.assert_allclose(got_val["SalesForecast"], got_val["expected"], rtol=1e-5)
    page = ReportPage()
    page.feed(storage.read_bytes(storage.join(attempt, REPORT_PAGE)).decode("utf-8"))
    text = "".join(page.text)
    assert "naive seasonal fallback" in text and "not promoted: loses to the naive baseline" in text


@pytest.mark.slow
def test_model_with_other_vocabularies_gets_reindexed_features(inputs, spark, tmp_path):
    """A champion model trained on older features: same values, different indices (one store unknown to it)."""
    features = inputs.features
    model_vocabs = {**features.vocabularies, "Store": list(reversed(predict_fixtures.STORE_IDS[1:]))}
    model = predict_fixtures.build_model(model_vocabs, seed=11)
    model_uri = storage.join(inputs.root, "models", "champions", "2015-07-30", tmp_path.name)
    out_uri = str(tmp_path / "out")
    predict_fixtures.write_model(model_uri, model_vocabs, model=model)
    manifest = predict.run_predict(spark, model_uri, features.uri, out_uri, raw_uri=inputs.raw)
    assert manifest["summary"]["remapped_vocabularies"] == ["Store"]

    # Encode Store independently, from the raw StoreId and the model's vocabulary.
    test = features.test.copy()
    test["Store"] = [model_vocabs["Store"].index(s) + 1 if s in model_vocabs["Store"] else 0 for s in test["StoreId"]]
    expected = pd.DataFrame({"Id": test["Id"], "expected": np.exp(model_log_sales(model, test))})
    got = read_predictions(storage.committed_uri(out_uri), "test").merge(expected, on="Id", validate="one_to_one")
    forecast = got["OpenStatus"] != "closed"
    np.testing.assert_allclose(got.loc[forecast, "SalesForecast"], got.loc[forecast, "expected"], rtol=1e-4)


def _broken_features(root: Path, mutate) -> tuple[str, str]:
    """(features URI, raw drop URI): the drop's test.csv as it was, the prepared test split mutated."""
    test, validation = predict_fixtures.make_frames(days=2, seed=3)
    raw = predict_fixtures.write_raw_test(str(root / "raw"), test)
    return predict_fixtures.write_features(str(root / "features"), mutate(test.copy()), validation).uri, raw


def _set_row(column: str, value):
    def mutate(test: pd.DataFrame) -> pd.DataFrame:
        test.loc[test.index[3], column] = value(test) if callable(value) else value
        return test
    return mutate


@pytest.mark.parametrize("mutate, message", [
    (_set_row("Id", lambda test: test["Id"].iloc[4]), r"test: column Id has 1 duplicated value\(s\), e.g. Ids \[\d+\]"),
    (_set_row("Open", 2), r"test: column Open must be 0, 1 or blank; 1 row\(s\) differ"),
    (_set_row("Promo", 9), r"test: column Promo has 1 index\(es\) outside 0\.\.3"),
    (lambda test: test.drop(columns=["Promo"]), r"test: missing column\(s\) \['Promo'\]"),
], ids=["duplicate-id", "invalid-open", "index-out-of-range", "missing-column"])
def test_bad_input_fails_clearly_and_commits_nothing(inputs, spark, tmp_path, mutate, message):
    out_uri = str(tmp_path / "out")
    features_uri, raw_uri = _broken_features(tmp_path, mutate)
    with pytest.raises(ForecastInputError, match=message):
        predict.run_predict(spark, inputs.model_uri, features_uri, out_uri, raw_uri=raw_uri)
    assert not storage.exists(storage.join(out_uri, storage.MANIFEST_NAME))


class _KeepOpen:
    """The test session behind main(): its `finally: spark.stop()` must not stop the shared session."""

    def __init__(self, spark):
        self._spark = spark

    def __getattr__(self, name):
        return getattr(self._spark, name)

    def stop(self):
        pass


def test_raw_test_id_missing_from_the_prepared_split_fails_with_exit_2(inputs, spark, tmp_path, monkeypatch, caplog):
    """prepare quarantined one test.csv row: the forecast would silently lack its Id, so predict refuses."""
    test, validation = predict_fixtures.make_frames(days=2, seed=4)
    raw_uri = predict_fixtures.write_raw_test(str(tmp_path / "raw"), test)
    lost = int(test["Id"].iloc[5])
    features_uri = predict_fixtures.write_features(str(tmp_path / "features"), test.drop(index=test.index[5]),
                                                   validation).uri
    out_uri = str(tmp_path / "out")
    with pytest.raises(ForecastInputError) as error:
        predict.run_predict(spark, inputs.model_uri, features_uri, out_uri, raw_uri=raw_uri)
    message = str(error.value)
    assert message.startswith(f"{raw_uri}/test.csv: 1 Id(s) are not in the prepared test split")
    assert f"e.g. Ids ['{lost}']" in message and f"{storage.committed_uri(features_uri)}/rejected/" in message
    assert not storage.exists(storage.join(out_uri, storage.MANIFEST_NAME))

    monkeypatch.setattr(spark_session, "build_spark_session", lambda name: _KeepOpen(spark))
    caplog.set_level("ERROR", logger="rossmann")
    argv = ["--model", inputs.model_uri, "--features", features_uri, "--raw", raw_uri, "--out", out_uri]
    assert predict.main(argv) == 2
    [line] = [r.getMessage() for r in caplog.records if r.name == "rossmann" and r.levelname == "ERROR"]
    assert "\n" not in line and line.startswith("predict failed: ") and f"['{lost}']" in line
    assert not storage.exists(storage.join(out_uri, storage.MANIFEST_NAME))


def test_prepared_ids_not_in_the_raw_test_csv_mean_another_drop(inputs, spark, tmp_path):
    test, validation = predict_fixtures.make_frames(days=2, seed=4)
    raw_uri = predict_fixtures.write_raw_test(str(tmp_path / "raw"), test.iloc[1:])
    features_uri = predict_fixtures.write_features(str(tmp_path / "features"), test, validation).uri
    with pytest.raises(ForecastInputError, match=r"1 Id\(s\) are not in .*test\.csv.*--raw is not the drop"):
        predict.run_predict(spark, inputs.model_uri, features_uri, str(tmp_path / "out"), raw_uri=raw_uri)


def test_a_test_csv_landed_again_after_prepare_is_refused(inputs, spark, tmp_path):
    """prepare recorded test.csv's SHA-256; the supplier lands the drop again (one store's day now closed) before
    predict: predict refuses, naming the file and both digests, and commits nothing (before: it forecast the new
    file's Ids from features prepared from the old one)."""
    test, validation = predict_fixtures.make_frames(days=2, seed=4)
    raw_uri = predict_fixtures.write_raw_test(str(tmp_path / "raw"), test)
    test_csv = storage.join(raw_uri, "test.csv")
    prepared, size = storage.sha256(test_csv)
    features_uri = predict_fixtures.write_features(str(tmp_path / "features"), test, validation, input_checksums={
        "test.csv": {"sha256": prepared, "bytes": size}}).uri
    metadata_uri = storage.join(storage.committed_uri(features_uri), "metadata.json")
    # as prepared: passes
    check_file_against_metadata(test_csv, storage.read_json(metadata_uri), metadata_uri, ForecastInputError)

    relanded = test.copy()
    relanded.loc[relanded.index[relanded["Open"] == 1][0], "Open"] = 0
    predict_fixtures.write_raw_test(raw_uri, relanded)
    now, _ = storage.sha256(test_csv)
    out_uri = str(tmp_path / "out")
    with pytest.raises(ForecastInputError, match=rf"^{re.escape(test_csv)}: SHA-256 {now} .*prepared the features "
                                                 rf"from test\.csv with SHA-256 {prepared} .*landed again after "
                                                 "prepare. Clear prepare_features"):
        predict.run_predict(spark, inputs.model_uri, features_uri, out_uri, raw_uri=raw_uri)
    assert not storage.exists(storage.join(out_uri, storage.MANIFEST_NAME))


def test_uncommitted_model_is_refused(inputs, spark, tmp_path):
    with pytest.raises(storage.OutputNotCommittedError, match="neither a committed train output"):
        predict.run_predict(spark, storage.join(inputs.root, "runs", "no-model"), inputs.features.uri,
                            str(tmp_path / "out"),
                    raw_uri=inputs.raw)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_S3A, reason="hadoop-aws (S3A) jars are not in pyspark/jars yet")
def test_job_reads_and_writes_s3(spark, s3_bucket, monkeypatch):
    from rossmann_jobs.spark_session import s3a_conf

    monkeypatch.setenv(STORAGE_ROOT_ENV, s3_bucket)
    for key, value in s3a_conf().items():  # the session may predate the moto server's environment
        spark.sparkContext._jsc.hadoopConfiguration().set(key.removeprefix("spark.hadoop."), value)
    test, validation = predict_fixtures.make_frames(days=3, seed=5)
    result = run_job(spark, committed_inputs(s3_bucket, test, validation))
    assert result.attempt.startswith(s3_bucket)
    assert sorted(result.submission["Id"]) == sorted(test["Id"]) and len(result.submission) == len(test)
    assert b"data:image/png;base64," in storage.read_bytes(storage.join(result.attempt, REPORT_PAGE))


@pytest.mark.slow
def test_spark_submit_cli(job, tmp_path):
    out_uri = f"file://{tmp_path}/out"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYSPARK_PYTHON": sys.executable}
    command = [str(JOBS_BIN / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               str(REPO_ROOT / "rossmann_jobs" / "predict.py"),
               "--model", job.model_uri, "--features", job.features.uri, "--raw", job.raw, "--out", out_uri]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    output = completed.stdout + completed.stderr  # spark-submit sends the Python driver's stderr to stdout
    assert completed.returncode == 0, output[-4000:]
    assert "committed" in output and "loaded model" in output
    manifest = storage.read_manifest(out_uri)
    assert manifest["summary"]["rows"] == job.manifest["summary"]["rows"]
    submission = pd.read_csv(io.BytesIO(storage.read_bytes(storage.join(storage.committed_uri(out_uri),
                                                                        "submission.csv"))))
    pd.testing.assert_frame_equal(submission, job.submission)
