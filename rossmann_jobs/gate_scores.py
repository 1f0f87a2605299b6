"""The quality gate's inputs: exp-RMSPE of challenger, champion and naive baseline on the same validation rows.

Scored on the driver's Spark session after training, with the definitions predict uses: model/broadcast.py's
broadcast model, forecast/vocabulary.py's re-indexing of the champion's inputs to the vocabularies it was trained
with, forecast/baseline.py's seasonal medians fitted on the train split only, and metrics.py's rmspe.
"""
from __future__ import annotations

import logging
from datetime import date, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rossmann_jobs.features.spec import LABEL_COL
from rossmann_jobs.forecast.baseline import BASELINE_COL, baseline_forecast
from rossmann_jobs.forecast.inference import with_log_forecast
from rossmann_jobs.forecast.metrics import ACTUAL_COL
from rossmann_jobs.forecast.prediction_frames import with_min_partitions
from rossmann_jobs.forecast.vocabulary import mappings_to_model, remap_indices, unknown_counts
from rossmann_jobs.metrics import rmspe
from rossmann_jobs.model.broadcast import LOG_FORECAST_COL, BroadcastModel
from rossmann_jobs.model.store import ModelSource, open_model
from rossmann_jobs.model.trust import IncompatibleModelError
from rossmann_jobs.training.feature_set import FeatureSet
from rossmann_jobs.training.prepared_files import read_files

log = logging.getLogger("rossmann.train")

CHALLENGER_COL, CHAMPION_COL = "SalesChallenger", "SalesChampion"


def with_model_forecast(rows: DataFrame, model: BroadcastModel, column: str) -> DataFrame:
    """rows (all columns) + `column`: the model's Sales forecast, exp of its log(Sales) output."""
    return (with_log_forecast(rows, model, rows.columns)
            .withColumn(column, F.exp(F.col(LOG_FORECAST_COL)).cast("double")).drop(LOG_FORECAST_COL))


def score(rows: DataFrame, forecast_cols: dict[str, str]) -> dict[str, Any]:
    """One aggregation: exp-RMSPE of each forecast column (name -> column) over the same rows, and the row count.

    The baseline lacks a row only when the train split has no row in its window (then it lacks every row): its
    score is then None, never a mean over fewer rows than the models'.
    """
    aggregates = [F.count(F.lit(1)).alias("validation_rows"),
                  F.sum(F.col(BASELINE_COL).isNull().cast("long")).alias("rows_without_baseline")]
    aggregates += [rmspe(ACTUAL_COL, column).alias(name) for name, column in forecast_cols.items()]
    result = rows.agg(*aggregates).first().asDict()
    if result.pop("rows_without_baseline"):
        log.warning("the naive baseline has no train-split history in the year before the validation window: "
                    "no baseline score, so the gate cannot promote this model")
        result["baseline"] = None
    return result


def incompatible(champion_model: str, why: str) -> dict[str, Any]:
    """The facts of a champion that cannot be scored: a challenger that beats the baseline replaces it
    (decide_promotion), once, when the feature spec or the model format changes."""
    return {"champion_model_uri": champion_model, "champion_remapped": [], "champion_incompatible": why}


def champion_forecast(rows: DataFrame, spark: SparkSession, features: FeatureSet, champion_model: str,
                      champion_sha256: str = "") -> tuple[DataFrame, BroadcastModel | None, dict[str, Any]]:
    """rows + CHAMPION_COL: the champion applied to the rows re-indexed to its own vocabularies (as predict does);
    the rows unchanged and no model when the champion cannot read them or is in an earlier format. A champion
    outside the allowed prefixes or whose files differ from the recorded SHA-256 fails the job (UntrustedModelError)."""
    try:
        source = open_model(champion_model, champion_sha256)
    except IncompatibleModelError as error:
        log.warning("champion %s is not scored: %s", champion_model, error)
        return rows, None, incompatible(champion_model, str(error))
    attempt, artifact = source.attempt, source.artifact
    if source.feature_mismatch():
        log.warning("champion %s was trained on other feature columns than this code's: it is not scored", attempt)
        return rows, None, incompatible(champion_model, source.feature_mismatch())
    mappings = mappings_to_model(features.metadata["vocabularies"], artifact["vocabularies"])
    if mappings:
        log.info("champion %s: re-indexing %s to its vocabularies (values it never saw: %s)", attempt,
                 sorted(mappings), unknown_counts(mappings))
    model = BroadcastModel(spark, source)
    # Re-indexing replaces the feature columns: it comes after the challenger and the baseline have used them.
    scored = with_model_forecast(remap_indices(rows, mappings), model, CHAMPION_COL)
    return scored, model, {"champion_model_uri": champion_model, "champion_remapped": sorted(mappings)}


def validation_window_start(features: FeatureSet, validation: DataFrame) -> date:
    """The first day of the validation window, as prepare recorded it in metadata.json (no query); features of a
    prepare that did not record it: the first validation row's date."""
    start = (features.metadata.get("validation_window") or {}).get("start")
    if start:
        return date.fromisoformat(start)
    return validation.agg(F.min(F.col("Date").cast("date")).alias("first")).first()["first"]


def gate_scores(spark: SparkSession, features: FeatureSet, challenger: ModelSource,
                champion_model: str | None, champion_sha256: str = "") -> dict[str, Any]:
    """metrics.json `gate_scores`: challenger (this job's own model), champion (model URI and its recorded
    SHA-256 digests; empty/None: no champion) and naive baseline exp-RMSPE on every validation row, the row count
    and what was scored."""
    validation = read_files(spark, features.validation_files)
    # Fitted on the train split's rows dated before the validation window only: never on what it is scored on.
    end = validation_window_start(features, validation) - timedelta(days=1)
    rows = (baseline_forecast(validation, read_files(spark, features.train_files), end)
            .withColumn(ACTUAL_COL, F.exp(F.col(LABEL_COL)).cast("double")))
    rows = with_min_partitions(rows, spark.sparkContext.defaultParallelism)
    columns = {"challenger": CHALLENGER_COL, "baseline": BASELINE_COL}
    facts: dict[str, Any] = {"champion_model_uri": None, "champion_remapped": []}
    models = [BroadcastModel(spark, challenger)]
    try:
        rows = with_model_forecast(rows, models[0], CHALLENGER_COL)
        if champion_model:
            rows, champion, facts = champion_forecast(rows, spark, features, champion_model, champion_sha256)
            if champion is not None:
                models.append(champion)
                columns["champion"] = CHAMPION_COL
        scores = score(rows, columns)
    finally:
        for model in models:
            model.destroy()
    result = {"challenger": scores["challenger"], "champion": scores.get("champion"), "baseline": scores["baseline"],
              "validation_rows": scores["validation_rows"], "baseline_history_end": end.isoformat(),
              "challenger_model_uri": challenger.attempt, **facts}
    log.info("gate scores on %d validation rows: challenger %s, champion %s, naive baseline %s",
             result["validation_rows"], result["challenger"], result["champion"], result["baseline"])
    return result
