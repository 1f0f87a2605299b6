"""Predict job: forecast the test horizon with the trained model; write submission.csv, predictions and a report.

spark-submit rossmann_jobs/predict.py --model URI --features URI --raw URI --out URI

--model is a committed train job output (resolved through its _SUCCESS manifest) or a model attempt itself: an
attempt prefix, or the gate's pinned champion copy of one (same layout: model/, metrics.json), under the storage
root's models/ or runs/ and with the SHA-256 recorded for it (--model-sha256, else its train job's): the model is
built by this code from artifact.json and its weights.npz, never deserialized (rossmann_jobs/model/files.py).
--features is a committed prepare job output, --raw the drop it was prepared from: submission.csv holds exactly one
row per Id of its test.csv, whose SHA-256 must be the one prepare recorded (a drop landed again since is refused).
The committed attempt under --out holds submission.csv, forecast_quantiles.csv (Id, Date, Store and P10/P50/P90, or
the --quantiles levels: the forecast times exp of the validation window's log-residual quantiles of the row's lead
week, forecast/quantiles.py), predictions/ (Parquet, partitioned by split; test rows with the naive seasonal
baseline and its quantiles beside the model's forecast and quantiles) and report/index.html (one page, plots
embedded). The layout: rossmann_jobs/output_layout.py.
Inference is vectorized: each Python worker loads the model once and applies it to whole Arrow batches; nothing but
small aggregates, the Id columns (checked there) and the submission's columns reach the driver.
"""
from __future__ import annotations

import argparse
import logging
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rossmann_jobs import storage
from rossmann_jobs.features.drop_verification import check_file_against_metadata
from rossmann_jobs.forecast import metrics, quantiles
from rossmann_jobs.forecast.baseline import BASELINE_COL
from rossmann_jobs.forecast.calibration import calibrate_quantiles
from rossmann_jobs.forecast.inference import SeasonalNaive
from rossmann_jobs.forecast.metrics import FORECAST_COL
from rossmann_jobs.forecast.predict_inputs import (
    check_feature_inputs,
    check_model_inputs,
    check_predictions,
    read_history,
    read_inputs,
    read_raw_test_ids,
    validation_window_start,
)
from rossmann_jobs.forecast.prediction_frames import (
    SPLIT_COL,
    TEST,
    VALIDATION,
    origin_forecasts,
    test_predictions,
    validation_predictions,
)
from rossmann_jobs.forecast.prepared_checks import ForecastInputError
from rossmann_jobs.forecast.submission import csv_bytes
from rossmann_jobs.job_runner import run_job, timed
from rossmann_jobs.model.broadcast import BroadcastModel
from rossmann_jobs.model.files import ARTIFACT_PATH
from rossmann_jobs.model.store import open_model
from rossmann_jobs.model.trust import ModelRefusedError
from rossmann_jobs.output_layout import METADATA_FILE, PREDICTIONS_DIR, QUANTILES_FILE, REPORT_PAGE, SUBMISSION_FILE
from rossmann_jobs.reporting.forecast_report import model_info, read_report_context, report_metrics, write_report
from rossmann_jobs.spark_session import read_parquet

log = logging.getLogger("rossmann.predict")

NAIVE_FALLBACK_NOTE = ("the naive seasonal fallback (median sales per store, weekday and promo over the 365 days up "
                       "to the as-of date): no model may forecast this date")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True,
                        help="train job output URI (committed) or a model attempt URI; empty: no model may forecast "
                             "the date, and the naive seasonal baseline forecasts it (the quality gate's fallback)")
    parser.add_argument("--model-sha256", default="",
                        help="the model files' recorded SHA-256 digests (the champion record's model_sha256, as "
                             "JSON); empty: those its train job committed")
    parser.add_argument("--features", required=True, help="prepare job output URI (committed)")
    parser.add_argument("--raw", required=True, help="the raw drop the features were prepared from (has test.csv)")
    parser.add_argument("--out", required=True, help="output URI; committed atomically")
    parser.add_argument("--trained-model", default="",
                        help="the run's train output (committed): its gate scores and training curves go into the "
                             "report (default: those of --model)")
    parser.add_argument("--gate-decision", default="", help="the quality gate's reason, shown in the report")
    parser.add_argument("--quantiles", default=",".join(f"{q:g}" for q in quantiles.QUANTILE_LEVELS),
                        help="comma-separated quantile levels of the quantile forecasts (default: %(default)s)")
    parser.add_argument("--scores", default="",
                        help="scoring root (summary.json): earlier forecasts scored by the as-of date go into the "
                             "report")
    return parser.parse_args(argv)


def run_predict(spark: SparkSession, model_uri: str, features_uri: str, out_uri: str, *, raw_uri: str,
                trained_model_uri: str = "", scores_uri: str = "", gate_decision: str = "",
                model_sha256: str = "", quantile_levels: tuple[float, ...] = quantiles.QUANTILE_LEVELS) -> dict:
    """The whole job on an existing session; returns the commit manifest."""
    timings: dict[str, float] = {}
    levels = quantiles.check_levels(quantile_levels)
    # The model's location, format and digests are checked before anything else is read or used.
    source = open_model(model_uri, model_sha256) if model_uri else None
    features_attempt = storage.committed_uri(features_uri)
    metadata_uri = storage.join(features_attempt, METADATA_FILE)
    metadata = storage.read_json(metadata_uri)
    if source is not None:
        model_attempt, artifact, training_metrics = source.attempt, source.artifact, source.training_metrics()
        sizes, as_of, mappings = check_model_inputs(artifact, storage.join(model_attempt, ARTIFACT_PATH), metadata,
                                                    metadata_uri)
    else:
        # No model may forecast the date (the quality gate's fallback): the naive seasonal baseline forecasts it,
        # with quantiles calibrated on its own validation residuals, as a model's are.
        model_attempt, artifact, training_metrics, mappings = SeasonalNaive.uri, {}, None, {}
        sizes, as_of = check_feature_inputs(metadata, metadata_uri)
        log.warning("no model: forecasting as of %s with the naive seasonal baseline (the fallback)", as_of)
    naive = source is None
    log.info("model %s, features %s, out %s", model_attempt, features_attempt, out_uri)
    partitions = spark.sparkContext.defaultParallelism
    attempt = storage.new_attempt_uri(out_uri)
    predictions_uri = storage.join(attempt, PREDICTIONS_DIR)

    with timed("read and check inputs, fit the baseline", timings):
        raw_ids, raw_test_uri = read_raw_test_ids(spark, raw_uri)
        # after Spark read it: what was read is checked
        check_file_against_metadata(raw_test_uri, metadata, metadata_uri, ForecastInputError)
        test, validation, from_origin, counts = read_inputs(
            spark, features_attempt, sizes, mappings, as_of, raw_ids, raw_test_uri, levels,
            validation_start=validation_window_start(metadata, metadata_uri) if naive else None)
    with timed("forecast and write predictions", timings):
        model = SeasonalNaive() if naive else BroadcastModel(spark, source)
        try:
            # Validation first (small, materialized once): its residuals calibrate the test rows' quantiles. The
            # naive baseline reads no trend, so its residuals need no second forecast from the rows' origins.
            validation_rows = validation_predictions(validation, model, partitions, levels).localCheckpoint()
            origin_rows = None if naive else origin_forecasts(from_origin, model, partitions).localCheckpoint()
            residual_table, quantile_summary = calibrate_quantiles(validation_rows, levels, origin_rows)
            (test_predictions(test, model, partitions, as_of, residual_table, levels)
             .unionByName(validation_rows)
             .write.partitionBy(SPLIT_COL).parquet(storage.spark_uri(predictions_uri)))
        finally:
            model.destroy()
    predictions = read_parquet(spark, predictions_uri)
    split = {name: predictions.filter(F.col(SPLIT_COL) == name) for name in (TEST, VALIDATION)}
    with timed("check predictions", timings):
        quantile_columns = quantiles.quantile_columns(levels)
        submission = split[TEST].select("Id", "StoreId", "Date", F.col(FORECAST_COL).alias("Sales"), BASELINE_COL,
                                        *quantile_columns).toPandas()
        check_predictions(predictions, raw_ids, submission, counts)
    with timed("write submission", timings):
        storage.write_bytes(storage.join(attempt, SUBMISSION_FILE), csv_bytes(submission))
        storage.write_bytes(storage.join(attempt, QUANTILES_FILE), quantiles.quantiles_csv_bytes(submission, levels))
    with timed("metrics and report", timings):
        validation_rmspe = metrics.overall_rmspe(split[VALIDATION])
        log.info("validation exp-RMSPE %s over %d rows", validation_rmspe, counts["validation"])
        run_metrics = report_metrics(validation_rmspe, counts, metadata, submission, quantile_summary,
                                     features_attempt, model_attempt)
        context = read_report_context(trained_model_uri, scores_uri, as_of, training_metrics,
                                      None if naive else model_attempt)
        info = [("model", NAIVE_FALLBACK_NOTE)] if naive else model_info(artifact, training_metrics)
        write_report(split[TEST], split[VALIDATION], storage.join(attempt, REPORT_PAGE), run_metrics, info,
                     validation_rmspe, context, gate_decision, levels,
                     title=f"Rossmann sales forecast: {NAIVE_FALLBACK_NOTE}" if naive else None,
                     history=read_history(spark, features_attempt))

    summary = {"rows": counts, "validation_exp_rmspe": validation_rmspe, "model": model_attempt,
               "forecast_model": SeasonalNaive.uri if naive else "network",
               "features": features_attempt, "raw": raw_uri, "drop_verified": bool(metadata.get("drop_verified")),
               "as_of": as_of.isoformat(),
               "horizon": metadata.get("test_window"), "baseline_column": BASELINE_COL,
               "remapped_vocabularies": sorted(mappings), "quantiles": quantile_summary, "timings_s": timings}
    manifest = storage.commit(out_uri, attempt, summary)
    log.info("committed %s: %s", storage.join(out_uri, manifest["attempt"]), summary)
    return manifest


def run(spark: SparkSession, args: argparse.Namespace) -> dict:
    levels = tuple(float(level) for level in args.quantiles.split(",") if level.strip())
    return run_predict(spark, args.model, args.features, args.out, raw_uri=args.raw,
                       trained_model_uri=args.trained_model, scores_uri=args.scores, gate_decision=args.gate_decision,
                       model_sha256=args.model_sha256, quantile_levels=levels)


def main(argv: list[str] | None = None) -> int:
    return run_job("predict", run, parse_args(argv),
                   (ForecastInputError, storage.OutputNotCommittedError, ModelRefusedError))


if __name__ == "__main__":
    sys.exit(main())
