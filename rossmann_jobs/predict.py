"""Predict job: forecast the test horizon with the trained model; write submission.csv, predictions and a report.

spark-submit rossmann_jobs/predict.py --model URI --features URI --raw URI --out URI

--model is a committed train job output (resolved through its _SUCCESS manifest) or a model attempt itself: an
attempt prefix, or the gate's pinned champion copy of one (same layout: model/, metrics.json), under the storage
root's models/ or runs/ and with the SHA-256 recorded for it (--model-sha256, else its train job's): the model is
built by this code from artifact.json and its weights.npz, never deserialized (rossmann_jobs/model_files.py).
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
from datetime import date

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rossmann_jobs import storage
from rossmann_jobs.features.drop_settings import UNVERIFIED_DROP_WARNING
from rossmann_jobs.features.raw_schemas import TEST as RAW_TEST
from rossmann_jobs.features.recent_level import LEAD_COL
from rossmann_jobs.features.spec import (
    CATEGORICAL_COLS,
    FEATURE_COLS,
    LABEL_COL,
    METADATA_FILE,
    REJECTED_DIR,
    TEST_DIR,
    TRAIN_DIR,
    VALIDATION_DIR,
)
from rossmann_jobs.features.validate import read_text_csv
from rossmann_jobs.forecast import metrics, quantiles, report, score_records
from rossmann_jobs.forecast.baseline import BASELINE_COL, baseline_forecast
from rossmann_jobs.forecast.inference import LOG_FORECAST_COL, BroadcastModel
from rossmann_jobs.forecast.inputs import (
    DATE_TYPES,
    FLOAT_TYPES,
    INTEGER_TYPES,
    ForecastInputError,
    check_columns,
    check_values,
    example_rows,
    feature_types,
    vocab_sizes,
)
from rossmann_jobs.forecast.metrics import ACTUAL_COL, FORECAST_COL
from rossmann_jobs.forecast.open_rule import (
    CLOSED,
    INVALID,
    OPEN,
    OPEN_BLANK,
    OPEN_STATUS_COL,
    is_forecast,
    with_open_status,
)
from rossmann_jobs.forecast.predictions import (
    SPLIT_COL,
    TEST,
    VALIDATION,
    origin_forecasts,
    test_predictions,
    validation_predictions,
)
from rossmann_jobs.forecast.submission import (
    check_accounting,
    check_forecast_values,
    check_raw_test_ids,
    check_submission_ids,
    check_unique_test_ids,
    csv_bytes,
)
from rossmann_jobs.forecast.vocabulary import mappings_to_model, remap_indices, unknown_counts
from rossmann_jobs.model_files import ARTIFACT_PATH, open_model
from rossmann_jobs.model_trust import ModelRefusedError
from rossmann_jobs.output_layout import (
    PREDICTIONS_DIR,
    QUANTILES_FILE,
    REPORT_PAGE,
    SCORES_SUMMARY_FILE,
    SUBMISSION_FILE,
    TRAIN_METRICS_FILE,
)
from rossmann_jobs.spark_session import run_job, timed

log = logging.getLogger("rossmann.predict")

WORST_STORES = 5
CANONICAL_KEY_TYPES = {"Id": "int", "StoreId": "int", "Open": "int", "Date": "date", LABEL_COL: "float"}
# What the baseline is fitted on (features.spec encodes DayOfWeek and Promo as indices, StoreId raw).
HISTORY_TYPES = {"StoreId": INTEGER_TYPES, "Date": DATE_TYPES, "DayOfWeek": INTEGER_TYPES, "Promo": INTEGER_TYPES,
                 LABEL_COL: FLOAT_TYPES}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="train job output URI (committed) or a model attempt URI")
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


def read_split(spark: SparkSession, uri: str, keys: dict[str, tuple[type, ...]], non_null_keys: list[str],
               sizes: dict[str, int]) -> tuple[DataFrame, int]:
    """A prepared split with its keys in canonical types, checked against the spec; and its row count."""
    df = spark.read.parquet(storage.spark_uri(uri))
    check_columns(df, uri, {**keys, **feature_types()})
    for column in keys:
        df = df.withColumn(column, F.col(column).cast(CANONICAL_KEY_TYPES[column]))
    return df, check_values(df, uri, sizes, non_null_keys + FEATURE_COLS)


def read_raw_test_ids(spark: SparkSession, raw_uri: str) -> tuple[pd.DataFrame, str]:
    """(RawId text + Id int, missing where it is not one, of every data row of the drop's test.csv, its URI); read
    with the explicit raw schema, collected: one row per horizon day and store."""
    uri = storage.join(raw_uri, RAW_TEST.name)
    if not storage.exists(uri):
        raise ForecastInputError(f"{uri}: missing; --raw must be the drop the features were prepared from.")
    # Read as prepare reads it (text schema by position, header skipped): the Ids prepare saw, BOM or not.
    rows = read_text_csv(spark, uri, RAW_TEST)
    return rows.select(F.col("Id").alias("RawId"), F.expr("try_cast(trim(Id) AS INT)").alias("Id")).toPandas(), uri


def check_raw_unchanged(raw_file_uri: str, metadata: dict, metadata_uri: str) -> None:
    """The raw file predict read is the one prepare verified: its SHA-256 is the one metadata.json records
    (input_checksums). A drop landed anew after prepare would otherwise be forecast from a plan the features were
    not made from."""
    name = raw_file_uri.rstrip("/").rsplit("/", 1)[-1]
    recorded = (metadata.get("input_checksums") or {}).get(name)
    if not recorded:
        log.warning("%s records no SHA-256 of %s (features of an earlier prepare): the file is not checked",
                    metadata_uri, name)
        return
    sha256, size = storage.sha256(raw_file_uri)
    if sha256 != recorded["sha256"]:
        raise ForecastInputError(
            f"{raw_file_uri}: SHA-256 {sha256} ({size:,} bytes), but prepare verified and prepared the features from "
            f"{name} with SHA-256 {recorded['sha256']} ({recorded.get('bytes', 0):,} bytes; {metadata_uri}): the "
            "drop was landed again after prepare. Clear prepare_features and the tasks after it, so that the "
            "features and the forecast come from one drop.")


def drop_verification(metadata: dict) -> str:
    """The report's line on the drop: verified against its manifest, or not (a drop closed by an empty marker)."""
    if metadata.get("drop_verified"):
        return "verified against its _SUCCESS manifest; test.csv checked against prepare's SHA-256"
    return (f"NOT verified: {UNVERIFIED_DROP_WARNING} (the drop's _SUCCESS marker held none; allowed by the "
            "allow_unverified_drop setting); test.csv checked against prepare's SHA-256")


def read_history(spark: SparkSession, features_attempt: str) -> DataFrame:
    """The prepared train + validation rows (every row dated <= as-of) with the columns the baseline is fitted on."""
    parts = []
    for name in (TRAIN_DIR, VALIDATION_DIR):
        uri = storage.join(features_attempt, name)
        df = spark.read.parquet(storage.spark_uri(uri))
        check_columns(df, uri, HISTORY_TYPES)
        parts.append(df.select(F.col("StoreId").cast("int"), F.col("Date").cast("date"),
                               F.col("DayOfWeek").cast("int"), F.col("Promo").cast("int"),
                               F.col(LABEL_COL).cast("float")))
    return parts[0].unionByName(parts[1])


def read_trend_history(spark: SparkSession, features_attempt: str) -> DataFrame:
    """State, Date and the trend columns of the prepared train + validation rows (every row dated <= as-of)."""
    columns = ["State", "Date", *quantiles.TREND_COLS]
    parts = [spark.read.parquet(storage.spark_uri(storage.join(features_attempt, name))).select(*columns)
             for name in (TRAIN_DIR, VALIDATION_DIR)]
    return parts[0].unionByName(parts[1])


def read_inputs(spark: SparkSession, features_attempt: str, sizes: dict[str, int], mappings: dict, as_of: date,
                raw_ids: pd.DataFrame, raw_test_uri: str, levels: tuple[float, ...] = quantiles.QUANTILE_LEVELS
                ) -> tuple[DataFrame, DataFrame, DataFrame, dict[str, int]]:
    """(test with OpenStatus, the baseline and its quantiles at levels, validation, validation with the trend its
    origin knew, row counts), all re-indexed to the model's vocabularies; the test split must hold every Id of the
    raw test.csv."""
    test_uri = storage.join(features_attempt, TEST_DIR)
    test_keys = {"Id": INTEGER_TYPES, "StoreId": INTEGER_TYPES, "Date": DATE_TYPES, "Open": INTEGER_TYPES}
    test, _ = read_split(spark, test_uri, test_keys, ["Id", "StoreId", "Date"], sizes)
    test_ids = test.select("Id").toPandas()["Id"]
    check_unique_test_ids(test_ids, test_uri)
    check_raw_test_ids(raw_ids, test_ids, raw_test_uri, test_uri, storage.join(features_attempt, REJECTED_DIR))
    validation, validation_rows = read_split(
        spark, storage.join(features_attempt, VALIDATION_DIR),
        {"StoreId": INTEGER_TYPES, "Date": DATE_TYPES, LABEL_COL: FLOAT_TYPES}, ["StoreId", "Date", LABEL_COL], sizes)
    # Fitted before the re-indexing: history and test rows share the prepare output's DayOfWeek/Promo indices.
    # Materialized once (small: one row per test Id), since the test frame is queried several times below.
    history = read_history(spark, features_attempt)
    baseline_columns = quantiles.quantile_columns(levels, quantiles.BASELINE_PREFIX)
    baseline = (baseline_forecast(test.select("Id", "StoreId", "DayOfWeek", "Promo"), history, as_of,
                                  levels=levels, columns=baseline_columns)
                .select("Id", BASELINE_COL, *baseline_columns).localCheckpoint())
    test = with_open_status(remap_indices(test, mappings)).join(F.broadcast(baseline), "Id", "left")
    status = {row[OPEN_STATUS_COL]: row["count"] for row in test.groupBy(OPEN_STATUS_COL).count().collect()}
    if status.get(INVALID):
        invalid = test.filter(F.col(OPEN_STATUS_COL) == INVALID)
        raise ForecastInputError(f"{test_uri}: column Open must be 0, 1 or blank; {status[INVALID]} row(s) differ, "
                                 f"e.g. {example_rows(invalid, ['Id', 'StoreId', 'Date', 'Open'])}")
    if status.get(OPEN_BLANK):
        log.warning("%d test row(s) have a blank Open: treated as open and forecast", status[OPEN_BLANK])
    counts = {"test": sum(status.values()), "forecast": status.get(OPEN, 0) + status.get(OPEN_BLANK, 0),
              "closed": status.get(CLOSED, 0), "blank_open": status.get(OPEN_BLANK, 0),
              "validation": validation_rows}
    # Before the re-indexing: the trend history's State indices are the prepare output's, as the validation rows'.
    from_origin = quantiles.trend_at_origin(validation, read_trend_history(spark, features_attempt), LEAD_COL)
    return test, remap_indices(validation, mappings), remap_indices(from_origin, mappings), counts


def check_predictions(predictions: DataFrame, raw_ids: pd.DataFrame, submission: pd.DataFrame,
                      counts: dict[str, int]) -> None:
    """Every test row forecast or closed exactly once, Ids as in the raw test.csv, forecasts finite and positive."""
    written = {(row[SPLIT_COL], row[OPEN_STATUS_COL]): row["count"]
               for row in predictions.groupBy(SPLIT_COL, OPEN_STATUS_COL).count().collect()}
    forecast = sum(n for (split, status), n in written.items() if split == TEST and status != CLOSED)
    check_accounting(counts["test"], forecast, written.get((TEST, CLOSED), 0))
    check_accounting(counts["validation"], written.get((VALIDATION, None), 0), 0)
    check_submission_ids(raw_ids["Id"], submission["Id"])
    check_forecast_values(predictions.filter((F.col(SPLIT_COL) == VALIDATION) | is_forecast()), FORECAST_COL)


def model_info(artifact: dict, training_metrics: dict | None) -> list[tuple[str, object]]:
    """The scalar facts of the artifact (and training metrics) for the report, whatever their names."""
    rows = [(f"artifact: {k}", v) for k, v in sorted(artifact.items()) if isinstance(v, (str, int, float, bool))]
    rows += [(f"training: {k}", v) for k, v in sorted((training_metrics or {}).items())
             if isinstance(v, (str, int, float, bool))]
    return rows


def read_report_context(trained_model_uri: str, scores_uri: str, as_of: date,
                        training_metrics: dict | None, model_attempt: str) -> dict:
    """What the report shows beyond this job's own rows: the run's trained model's metrics.json (gate scores,
    curves; else the forecasting model's) and the earlier forecasts' scores known by as_of."""
    training, training_uri = training_metrics, storage.join(model_attempt, TRAIN_METRICS_FILE)
    if trained_model_uri:
        training_uri = storage.join(storage.committed_uri(trained_model_uri), TRAIN_METRICS_FILE)
        training = storage.read_json(training_uri) if storage.exists(training_uri) else None
    summary_uri = storage.join(scores_uri, SCORES_SUMMARY_FILE) if scores_uri else None
    summary = storage.read_json(summary_uri) if summary_uri and storage.exists(summary_uri) else None
    return {"training": training, "training_uri": training_uri,
            "accuracy": score_records.scored_as_of(summary, as_of)}


def write_report(test: DataFrame, validation: DataFrame, report_uri: str, run_metrics: list[tuple[str, object]],
                 info: list[tuple[str, object]], validation_rmspe: float | None, context: dict,
                 gate_decision: str, levels: tuple[float, ...] = quantiles.QUANTILE_LEVELS) -> None:
    """Aggregate in Spark, plot the small results on the driver, write the one self-contained index.html."""
    store_totals = metrics.per_store(validation).toPandas()
    chosen = report.pick_stores(store_totals)
    daily = metrics.daily_totals(validation, [ACTUAL_COL, FORECAST_COL]).toPandas()
    by_store = metrics.daily_totals(validation.filter(F.col("StoreId").isin(chosen)), [ACTUAL_COL, FORECAST_COL],
                                    by=["StoreId"]).toPandas()
    horizon = (test.groupBy("Date")
               .agg(F.sum(FORECAST_COL).alias(FORECAST_COL), F.sum(is_forecast().cast("int")).alias("OpenStores"))
               .orderBy("Date").toPandas())
    store_rmspe = dict(zip(store_totals["StoreId"].astype(int), store_totals["rmspe"]))
    worst = store_totals.dropna(subset=["rmspe"]).sort_values(["rmspe", "StoreId"], ascending=[False, True])
    # The fan: the outer levels as the band, the median (else the point forecast) as the line; short names.
    short = {name: quantiles.level_name(level) for name, level in zip(quantiles.quantile_columns(levels), levels)}
    low, high = list(short)[0], list(short)[-1]
    mid = next((name for name, label in short.items() if label == "P50"), FORECAST_COL)
    fan = (test.filter(F.col("StoreId").isin(chosen) & is_forecast())
           .select("StoreId", "Date", *dict.fromkeys([low, mid, high])).toPandas().rename(columns=short))
    fan_actuals = validation.filter(F.col("StoreId").isin(chosen)).select("StoreId", "Date", ACTUAL_COL).toPandas()
    plots = [("Validation window: forecast vs actual, all stores", report.overall_plot(daily, validation_rmspe)),
             ("Validation window: forecast vs actual, selected stores", report.stores_plot(by_store, store_rmspe)),
             ("Forecast horizon", report.horizon_plot(horizon)),
             (f"Forecast horizon: {short[low]}-{short[high]} fan, selected stores",
              report.fan_chart(fan_actuals, fan, short[low], short.get(mid, mid), short[high]))]
    page = report.forecast_page("Rossmann sales forecast", run_metrics, plots, worst.head(WORST_STORES), info,
                                gate_decision=gate_decision or None, **context)
    storage.write_bytes(report_uri, page.encode("utf-8"))


def calibrate_quantiles(validation_rows: DataFrame, levels: tuple[float, ...],
                        from_origin: DataFrame | None = None) -> tuple[dict[int, list[float]], dict]:
    """(per lead week the non-crossing residual quantiles at levels, what the summary says of them) from the
    validation predictions (out of time, all dated <= the as-of date); sparse lead weeks pooled with neighbours.
    from_origin (StoreId, Date, ORIGIN_FORECAST_COL: predictions.origin_forecasts) adds the trend's drift over
    the lead in either direction (quantiles.validation_residuals)."""
    origin_col = None if from_origin is None else quantiles.ORIGIN_FORECAST_COL
    rows = (validation_rows if from_origin is None
            else validation_rows.join(from_origin, ["StoreId", "Date"], "left")).filter(F.col(ACTUAL_COL) > 0)
    delta = (F.lit(None).cast("double") if origin_col is None
             else F.abs(F.col(origin_col) - F.col(LOG_FORECAST_COL)))
    stats = {row[quantiles.LEAD_WEEK_COL]: (row["count"], row["drift"])
             for row in rows.groupBy(quantiles.LEAD_WEEK_COL).agg(F.count(F.lit(1)).alias("count"),
                                                                  F.avg(delta).alias("drift")).collect()}
    counts = {week: count for week, (count, _drift) in stats.items()}
    residuals = quantiles.validation_residuals(rows, ACTUAL_COL, LOG_FORECAST_COL, origin_col)
    spans = quantiles.pooled_weeks(counts)
    weekly = quantiles.residual_quantiles(residuals, spans, levels).collect()
    location = quantiles.median_residual(residuals)
    table = quantiles.centred_table(
        quantiles.quantile_table({row[quantiles.LEAD_WEEK_COL]: row["_q"] for row in weekly}, levels),
        {row[quantiles.LEAD_WEEK_COL]: row["_median"] for row in weekly}, location)
    pooled = {week: list(span) for week, span in spans.items() if span != (week, week)}
    if pooled:
        log.warning("lead week(s) with fewer than %d validation rows calibrated on neighbouring weeks: %s",
                    quantiles.MIN_ROWS_PER_WEEK, pooled)
    method = "validation residual quantiles per lead week, centred on the window's median residual"
    summary = {"levels": list(levels),
               "method": method if origin_col is None else f"{method}, +- the trend's drift from the rows' origin",
               "median_log_residual": None if location is None else round(location, 6),
               "validation_rows_by_lead_week": {str(week): counts.get(week, 0) for week in sorted(table)},
               "trend_drift_by_lead_week": {str(week): None if stats.get(week, (0, None))[1] is None
                                            else round(stats[week][1], 6) for week in sorted(table)},
               "pooled_lead_weeks": {str(week): span for week, span in pooled.items()},
               "min_rows_per_lead_week": quantiles.MIN_ROWS_PER_WEEK,
               "log_residual_quantiles_by_lead_week": {str(week): [round(v, 6) for v in values]
                                                       for week, values in table.items()}}
    return table, summary


def run_predict(spark: SparkSession, model_uri: str, features_uri: str, out_uri: str, *, raw_uri: str,
                trained_model_uri: str = "", scores_uri: str = "", gate_decision: str = "",
                model_sha256: str = "", quantile_levels: tuple[float, ...] = quantiles.QUANTILE_LEVELS) -> dict:
    """The whole job on an existing session; returns the commit manifest."""
    timings: dict[str, float] = {}
    levels = quantiles.check_levels(quantile_levels)
    source = open_model(model_uri, model_sha256)   # location, format and digests checked before anything is used
    model_attempt, features_attempt = source.attempt, storage.committed_uri(features_uri)
    artifact_uri, metadata_uri = storage.join(model_attempt, ARTIFACT_PATH), storage.join(features_attempt,
                                                                                          METADATA_FILE)
    artifact, metadata = source.artifact, storage.read_json(metadata_uri)
    metrics_uri = storage.join(model_attempt, TRAIN_METRICS_FILE)
    training_metrics = storage.read_json(metrics_uri) if storage.exists(metrics_uri) else None
    log.info("model %s, features %s, out %s", model_attempt, features_attempt, out_uri)

    for uri, document in ((artifact_uri, artifact), (metadata_uri, metadata)):
        missing = sorted(set(CATEGORICAL_COLS) - set(document.get("vocabularies") or {}))
        if missing:
            raise ForecastInputError(f"{uri}: 'vocabularies' (column -> known values in index order) lacks {missing};"
                                     " needed to check that the model and the features encode values alike")
    sizes = vocab_sizes(metadata, metadata_uri)
    try:
        as_of = date.fromisoformat(metadata["as_of"])
    except (KeyError, TypeError, ValueError) as error:
        raise ForecastInputError(f"{metadata_uri}: 'as_of' must be a YYYY-MM-DD date ({error!r}); the baseline is "
                                 "fitted on the rows up to it") from None
    mappings = mappings_to_model(metadata["vocabularies"], artifact["vocabularies"])
    if mappings:
        log.warning("features and model vocabularies differ; re-indexing %s (values unknown to the model: %s)",
                    sorted(mappings), unknown_counts(mappings))
    partitions = spark.sparkContext.defaultParallelism
    attempt = storage.new_attempt_uri(out_uri)
    predictions_uri = storage.join(attempt, PREDICTIONS_DIR)

    with timed("read and check inputs, fit the baseline", timings):
        raw_ids, raw_test_uri = read_raw_test_ids(spark, raw_uri)
        check_raw_unchanged(raw_test_uri, metadata, metadata_uri)   # after Spark read it: what was read is checked
        test, validation, from_origin, counts = read_inputs(spark, features_attempt, sizes, mappings, as_of, raw_ids,
                                                            raw_test_uri, levels)
    with timed("forecast and write predictions", timings):
        model = BroadcastModel(spark, source)
        try:
            # Validation first (small, materialized once): its residuals calibrate the test rows' quantiles.
            validation_rows = validation_predictions(validation, model, partitions, levels).localCheckpoint()
            origin_rows = origin_forecasts(from_origin, model, partitions).localCheckpoint()
            residual_table, quantile_summary = calibrate_quantiles(validation_rows, levels, origin_rows)
            (test_predictions(test, model, partitions, as_of, residual_table, levels)
             .unionByName(validation_rows)
             .write.partitionBy(SPLIT_COL).parquet(storage.spark_uri(predictions_uri)))
        finally:
            model.destroy()
    predictions = spark.read.parquet(storage.spark_uri(predictions_uri))
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
        run_metrics = [("validation exp-RMSPE", validation_rmspe), ("validation rows", counts["validation"]),
                       ("validation window", metadata.get("validation_window")),
                       ("test rows", counts["test"]), ("forecast (open) rows", counts["forecast"]),
                       ("of which blank Open (treated as open)", counts["blank_open"]),
                       ("closed rows (Sales 0)", counts["closed"]), ("horizon", metadata.get("test_window")),
                       ("as of", metadata.get("as_of")), ("total forecast sales", float(submission["Sales"].sum())),
                       ("total naive seasonal baseline sales", float(submission[BASELINE_COL].sum())),
                       ("quantile levels", quantile_summary["levels"]),
                       ("validation rows per lead week 1..7 (their residuals calibrate the quantiles)",
                        ", ".join(str(n) for n in quantile_summary["validation_rows_by_lead_week"].values())),
                       ("mean |trend drift| per lead week 1..7 (log; widens the quantiles both ways)",
                        ", ".join("-" if v is None else f"{v:.3f}"
                                  for v in quantile_summary["trend_drift_by_lead_week"].values())),
                       ("lead weeks pooled with neighbours (too few rows)",
                        ", ".join(f"{week}: weeks {span[0]}-{span[1]}"
                                  for week, span in quantile_summary["pooled_lead_weeks"].items()) or "none"),
                       ("raw drop", drop_verification(metadata)),
                       ("features", features_attempt), ("model", model_attempt)]
        context = read_report_context(trained_model_uri, scores_uri, as_of, training_metrics, model_attempt)
        write_report(split[TEST], split[VALIDATION], storage.join(attempt, REPORT_PAGE), run_metrics,
                     model_info(artifact, training_metrics), validation_rmspe, context, gate_decision, levels)

    summary = {"rows": counts, "validation_exp_rmspe": validation_rmspe, "model": model_attempt,
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
