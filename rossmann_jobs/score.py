"""Scoring job: score past forecasts on the actual sales of a later drop; records, summary.json and a report.

spark-submit rossmann_jobs/score.py --raw URI --as-of D --forecasts URI --out URI

--raw is the drop for D (its train.csv holds the actual sales up to D), --forecasts a JSON list of forecast records
(as_of < D, run_id, run_key, predictions_uri: a committed predict attempt's predictions/). Under the scores root
--out it writes, each as one object (one PUT): <D0>/<run key>/<D>.json per forecast (overall, per lead day, per lead
week and per store exp-RMSPE, median forecast/actual ratio, P10-P90 interval coverage and weighted quantile loss of
the model and the baseline, with row counts; status "pending" while no actual is known), then summary.json (the
latest record per forecast, and the "recent" check: every row of this run's forecasts dated in the last 14 days up to
D) and report/index.html. Re-running with the same inputs rewrites the same bytes. train.csv must match the
SHA-256 the drop's _SUCCESS manifest lists (checked after it is read; a drop closed by an empty marker is scored
unverified, with a warning). Scoring rules:
rossmann_jobs/past_forecasts/scores.py.
"""
from __future__ import annotations

import argparse
import logging
import sys
from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rossmann_jobs import storage
from rossmann_jobs.features.drop_verification import check_file_against_manifest
from rossmann_jobs.features.raw_schemas import TRAIN
from rossmann_jobs.features.validate import RawInputError, parse_columns, read_text_csv
from rossmann_jobs.forecast.baseline import BASELINE_COL
from rossmann_jobs.forecast.metrics import FORECAST_COL
from rossmann_jobs.forecast.prediction_frames import SPLIT_COL, TEST
from rossmann_jobs.job_runner import run_job, timed
from rossmann_jobs.output_layout import REPORT_PAGE, SCORES_SUMMARY_FILE
from rossmann_jobs.past_forecasts import records as score_records
from rossmann_jobs.past_forecasts import scores as scoring
from rossmann_jobs.past_forecasts.records import RECENT_WINDOW_DAYS, ScoringInputError
from rossmann_jobs.reporting import scores_page
from rossmann_jobs.spark_session import materialized, read_parquet

log = logging.getLogger("rossmann.score")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", required=True, help="the drop for the scoring date (train.csv = actuals)")
    parser.add_argument("--as-of", required=True, type=date.fromisoformat, help="the scoring date D (YYYY-MM-DD)")
    parser.add_argument("--forecasts", required=True, help="URI of the JSON list of forecast records to score")
    parser.add_argument("--out", required=True, help="scores root URI")
    return parser.parse_args(argv)


def read_forecast(spark: SparkSession, record: dict) -> DataFrame:
    """A forecast's test-split predictions as scoring.FORECAST_COLUMNS (baseline and quantiles null where predict
    wrote none)."""
    uri = record["predictions_uri"]
    if not storage.exists(storage.join(uri, f"{SPLIT_COL}={TEST}")):
        raise ScoringInputError(f"forecast {score_records.forecast_key(record)}: {uri} has no {SPLIT_COL}={TEST}/ "
                                "predictions (a forecast registered before publication copied it, whose "
                                "attempt a predict re-run replaced?): re-run the run's publish_forecast task so "
                                "the registry names a published copy.")
    df = read_parquet(spark, storage.join(uri, f"{SPLIT_COL}={TEST}"))
    optional = [BASELINE_COL, *scoring.MODEL_QUANTILES, *scoring.BASELINE_QUANTILES]
    return df.select(F.lit(score_records.forecast_key(record)).alias(scoring.KEY_COL),
                     F.lit(date.fromisoformat(record["as_of"])).alias(scoring.AS_OF_COL),
                     F.col("StoreId").cast("int"), F.col("Date").cast("date"), F.col(FORECAST_COL).cast("double"),
                     *[(F.col(name) if name in df.columns else F.lit(None)).cast("double").alias(name)
                       for name in optional])


def read_actuals(spark: SparkSession, raw_uri: str, after: date, through: date) -> DataFrame:
    """The drop's train.csv parsed as prepare parses it (explicit schema), reduced to scoreable actuals."""
    uri = storage.join(raw_uri, TRAIN.name)
    if not storage.exists(uri):
        raise ScoringInputError(f"{uri}: missing; --raw must be the drop for the scoring date")
    try:
        text = read_text_csv(spark, uri, TRAIN)   # by header name, as prepare reads it
    except RawInputError as error:
        raise ScoringInputError(f"{uri}: {error}") from None
    return scoring.actual_sales(parse_columns(text, TRAIN), after, through)


# What each score record holds per forecast, by the name it has there: every grouping of the scored rows in one
# aggregation (scoring.grouped_scores); a grouping's one column is named like the grouping in the record.
GROUPINGS = {"overall": [], "lead_day": [scoring.LEAD_COL], "lead_week": [scoring.LEAD_WEEK_COL], "store": ["StoreId"]}
GROUPING_COLUMNS = tuple(dict.fromkeys(column for by in GROUPINGS.values() for column in by))


def scores_by_grouping(scored: DataFrame) -> dict[str, dict[str, list[dict]]]:
    """grouping -> forecast key -> that forecast's scores, one dict per value of the grouping's column, in order."""
    out: dict[str, dict[str, list[dict]]] = {name: {} for name in GROUPINGS}
    rows = [row.asDict() for row in scoring.grouped_scores(scored, GROUPINGS).collect()]
    for name, by in GROUPINGS.items():
        mine = sorted((row for row in rows if row[scoring.GROUPING_COL] == name),
                      key=lambda row: (row[scoring.KEY_COL], *(row[column] for column in by)))
        for row in mine:
            key = row[scoring.KEY_COL]
            entry = {name: row[column] for column in by}
            entry.update((column, value) for column, value in row.items()
                         if column not in (scoring.GROUPING_COL, scoring.KEY_COL, *GROUPING_COLUMNS))
            out[name].setdefault(key, []).append(entry)
    return out


def run_score(spark: SparkSession, raw_uri: str, scoring_date: date, forecasts_uri: str,
              out_uri: str) -> dict | None:
    """The whole job on an existing session; returns summary.json's content (None when there is nothing to score)."""
    forecasts = score_records.check_forecast_list(storage.read_json(forecasts_uri), forecasts_uri, scoring_date)
    if not forecasts:
        log.info("%s lists no forecast: nothing to score", forecasts_uri)
        return None
    timings: dict[str, float] = {}
    with timed("read forecasts and actuals", timings):
        frames = [read_forecast(spark, record) for record in forecasts]
        predictions = frames[0]
        for frame in frames[1:]:
            predictions = predictions.unionByName(frame)
        first_as_of = min(date.fromisoformat(record["as_of"]) for record in forecasts)
        actuals = read_actuals(spark, raw_uri, first_as_of, scoring_date)
        # Each is read once here: the scoring plan reads the forecasts four times and joins the actuals twice.
        predictions, actuals = materialized(predictions), materialized(actuals)
    with timed("score", timings):
        horizons = {row[scoring.KEY_COL]: {"start": row[scoring.HORIZON_START_COL].isoformat(),
                                           "end": row[scoring.HORIZON_END_COL].isoformat()}
                    for row in scoring.horizons(predictions).collect()}
        scored = scoring.scored_rows(predictions, actuals, scoring_date).cache()
        try:
            tables = scores_by_grouping(scored)
            overall, by_lead, by_lead_week, by_store = (tables[name] for name in GROUPINGS)
            recent = score_records.recent_check(
                scoring.recent_scores(scored, scoring_date, RECENT_WINDOW_DAYS).first().asDict(), scoring_date,
                RECENT_WINDOW_DAYS)
        finally:
            scored.unpersist()
        # after Spark read the actuals: what was scored against is checked
        check_file_against_manifest(raw_uri, TRAIN.name, ScoringInputError, then="clear score_forecasts")

    entries = {}
    for forecast in forecasts:
        key = score_records.forecast_key(forecast)
        record = score_records.forecast_record(forecast, scoring_date, raw_uri, horizons.get(key),
                                               (overall.get(key) or [None])[0], by_lead.get(key, []),
                                               by_store.get(key, []), by_lead_week.get(key, []),
                                               scoring.SCORED_LEVELS)
        record_uri = storage.join(out_uri, score_records.record_path(forecast, scoring_date))
        storage.write_json(record_uri, record)
        entries[key] = score_records.summary_entry(record, record_uri)
        log.info("forecast %s scored with %s: %s %s", key, scoring_date, record["status"], record["overall"])
    # Written after the records it summarizes, and merged with the previous one (the records of earlier dates).
    summary_uri = storage.join(out_uri, SCORES_SUMMARY_FILE)
    previous = storage.read_json(summary_uri) if storage.exists(summary_uri) else None
    summary = score_records.merge_summary(previous, entries, recent)
    storage.write_json(summary_uri, summary)
    storage.write_bytes(storage.join(out_uri, REPORT_PAGE),
                        scores_page.index_html(summary))
    log.info("scores for %s: %s; last %d days: %s (timings %s)", scoring_date, summary["overall"],
             RECENT_WINDOW_DAYS, recent, timings)
    return summary


def run(spark: SparkSession, args: argparse.Namespace) -> dict | None:
    return run_score(spark, args.raw, args.as_of, args.forecasts, args.out)


def main(argv: list[str] | None = None) -> int:
    return run_job("score", run, parse_args(argv), (ScoringInputError,))


if __name__ == "__main__":
    sys.exit(main())
