"""Spark job: raw Rossmann CSV drop -> model-ready train/validation/test Parquet, quarantine and metadata.json.

    spark-submit rossmann_jobs/prepare.py --raw URI --out URI --as-of YYYY-MM-DD [--sample-rate F] [--seed N]
        [--num-shards 16] [--max-reject-fraction 0.001] [--point-in-time {strict,reference}]
        [--validation-window {recent,year-earlier}] [--max-staleness-days 0] [--no-allow-unverified-drop]

For --as-of D, no feature depends on a value dated after D (--point-in-time strict, the default; `reference` keeps
Horovod's example's time-travelling trend and weather joins); train/validation hold train.csv rows dated <= D, the
horizon (test split) every test.csv row dated > D, validation the last 48 days up to D (--validation-window), and
every row's lead day and recent store levels are computed from sales up to its own forecast origin. Every input
row ends in exactly one place (a split, an exclusion or rejected/ with its reason), checked before the atomic
commit; the drop is verified first (features/drop_verification.py) and must be fresh (features/freshness.py).
The contracts in full: docs/ARCHITECTURE.md, "Point in time" and "Bad input".
"""
from __future__ import annotations

import argparse
import logging
import sys
from datetime import date
from typing import Any

from pyspark.sql import Observation, SparkSession

from rossmann_jobs import storage
from rossmann_jobs.features import drop_settings, encode, freshness, point_in_time, recent_level, row_accounting, split
from rossmann_jobs.features.drop_verification import (
    check_unchanged_since_inspected,
    inspect_raw_files,
    verify_against_manifest,
)
from rossmann_jobs.features.metadata import metadata_document
from rossmann_jobs.features.pipeline import (
    VOCABULARY_ROW,
    classify_lookups,
    classify_sales,
    horizon_row,
    quarantined_rows,
    sales_features,
    sales_rows,
)
from rossmann_jobs.features.prepared_output import write_outputs
from rossmann_jobs.features.raw_schemas import RAW_FILES, TEST, TRAIN
from rossmann_jobs.features.row_checks import (
    check_lookups_and_plan,
    check_rows,
    check_train_parse,
    column_report,
    train_tallies,
)
from rossmann_jobs.features.validate import (
    AccountingError,
    RawInputError,
    parse_columns,
    read_text_csv,
)
from rossmann_jobs.job_runner import run_job, timed
from rossmann_jobs.output_layout import METADATA_FILE
from rossmann_jobs.spark_session import concurrently, held_frames

log = logging.getLogger("rossmann.prepare")

DEFAULT_NUM_SHARDS = 16
DEFAULT_MAX_REJECT_FRACTION = 0.001
SPLIT_SOURCES = {"train": TRAIN.name, "validation": TRAIN.name, "test": TEST.name}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--raw", required=True, help="URI of the folder holding the 7 raw CSV files")
    parser.add_argument("--out", required=True, help="output URI (committed atomically)")
    parser.add_argument("--as-of", required=True, type=date.fromisoformat, help="YYYY-MM-DD: last known sales day")
    parser.add_argument("--sample-rate", type=float, default=None, help="fraction of train/validation rows to keep")
    parser.add_argument("--seed", type=int, default=42, help="seed of the deterministic sample")
    parser.add_argument("--num-shards", type=int, default=DEFAULT_NUM_SHARDS, help="Parquet files per split")
    parser.add_argument("--max-reject-fraction", type=float, default=DEFAULT_MAX_REJECT_FRACTION,
                        help="per file, the largest share of rows that may be quarantined instead of failing")
    parser.add_argument("--point-in-time", choices=point_in_time.MODES, default=point_in_time.DEFAULT_MODE,
                        help="strict: no feature uses a value dated after --as-of; reference: the reference's joins")
    parser.add_argument("--validation-window", choices=split.VALIDATION_RULES, default=split.DEFAULT_VALIDATION_RULE,
                        help="recent: the last horizon-length days up to --as-of (out of time, like the forecast); "
                             "year-earlier: the horizon shifted back a year (Horovod's example)")
    parser.add_argument("--max-staleness-days", type=int, default=freshness.DEFAULT_MAX_STALENESS_DAYS,
                        help="how many days train.csv's latest row may lie before --as-of (late actuals); "
                             "0: the drop must hold the actuals of the as-of date itself")
    parser.add_argument("--allow-unverified-drop", action=argparse.BooleanOptionalAction,
                        default=drop_settings.ALLOW_UNVERIFIED_DROP,
                        help="prepare a drop whose _SUCCESS marker is empty (no manifest to verify the files "
                             "against); --no-allow-unverified-drop refuses it")
    args = parser.parse_args(argv)
    if args.sample_rate is not None and not 0 < args.sample_rate <= 1:
        parser.error("--sample-rate must be in (0, 1]")
    if args.num_shards < 1:
        parser.error("--num-shards must be >= 1")
    if args.max_staleness_days < 0:
        parser.error("--max-staleness-days must be >= 0")
    return args


# --- input ------------------------------------------------------------------------------------------------------

def horizon_window(horizon: tuple[date, date] | None, as_of: date,
                   validation_rule: str = split.DEFAULT_VALIDATION_RULE) -> split.Windows:
    """The windows for as_of, from the horizon's first and last date; no horizon is an error."""
    if horizon is None:
        raise RawInputError(f"test.csv: no row is dated after --as-of {as_of}: there is nothing to forecast. Use "
                            "an earlier as-of date or a newer drop.")
    return split.plan_windows(as_of, *horizon, validation_rule)


# --- the job ----------------------------------------------------------------------------------------------------

def run_prepare(spark: SparkSession, raw: str, out: str, as_of: date, sample_rate: float | None = None,
                seed: int = 42, num_shards: int = DEFAULT_NUM_SHARDS,
                max_reject_fraction: float = DEFAULT_MAX_REJECT_FRACTION,
                point_in_time_mode: str = point_in_time.DEFAULT_MODE,
                validation_rule: str = split.DEFAULT_VALIDATION_RULE,
                max_staleness_days: int = freshness.DEFAULT_MAX_STALENESS_DAYS,
                allow_unverified_drop: bool = drop_settings.ALLOW_UNVERIFIED_DROP) -> dict[str, Any]:
    """Prepare features for as_of from the drop at raw, commit them at out; returns metadata.json's content."""
    point_in_time.lookup_cutoff(point_in_time_mode, as_of)   # refuses an unknown mode before any work
    split.check_validation_rule(validation_rule)             # ... and an unknown validation window
    timings: dict[str, float] = {}
    with timed("inspect raw files (presence, header, sha256, rows)", timings):
        inputs = inspect_raw_files(raw)
        verified = verify_against_manifest(raw, inputs, allow_unverified_drop)
    input_rows = {name: facts["rows"] for name, facts in inputs.items()}
    log.info("input rows: %s", input_rows)

    parsed = {name: parse_columns(read_text_csv(spark, storage.join(raw, name), raw_file, inputs[name]["header"]),
                                  raw_file, fields=len(inputs[name]["header"]))
              for name, raw_file in RAW_FILES.items()}
    with held_frames() as hold:   # every frame materialized in the block is released when it ends
        with timed("parse and classify the plan and the lookup files, materialized", timings):
            # Small (a lookup file 16k rows at most, the plan 41k at full scale) and read several times: by the
            # checks, the joins, the row accounting. Each is materialized, so every later plan holds it as a leaf,
            # not its parse and classification: building and analysing the feature pass's DataFrame took 10 s of a
            # small drop's prepare with them inlined (bench/RESULTS.md, "A small drop's prepare: the lookups as
            # leaves"). The plan's problems are then examined without re-planning the parse (the optimizer inlines
            # the parse's CASE expressions into the filter and the struct fields a quarantine query reads, and runs
            # out of memory).
            parsed[TEST.name] = hold(parsed[TEST.name])
            lookups, state_names = classify_lookups(parsed, RAW_FILES, as_of, point_in_time_mode)
            lookups, state_names = lookups.each(hold), hold(state_names)
        rows = sales_rows(parsed[TRAIN.name], parsed[TEST.name])
        with timed("check the lookup files and the plan on their own, and the drop's freshness", timings):
            # Before any join: a broken lookup file is named as such, not by the join misses it causes in train.csv.
            # The freshness facts' scan of train.csv runs beside the lookups' small jobs; a lookup error still
            # comes first.
            # The same scan counts train.csv's parse problems (before the facts' filter): a column that does not
            # parse is reported as such, before the freshness check that would only see the rows it leaves.
            tallied = Observation("train.csv parse")
            lookup_groups, facts = concurrently(
                lambda: check_lookups_and_plan({**lookups.by_file, "state_names.csv": state_names},
                                               parsed[TEST.name], input_rows, max_reject_fraction),
                lambda: [row.asDict() for row in freshness.freshness_facts(
                    rows.observe(tallied, *train_tallies()), as_of).collect()])
            unreadable = check_train_parse(parsed[TRAIN.name], tallied.get, input_rows[TRAIN.name],
                                           max_reject_fraction)
            freshness.check_freshness(facts, as_of, max_staleness_days,
                                      lambda: freshness.stale_plan_examples(rows, as_of))
        with timed("features of every sales row (validate, join, elapsed), horizon and vocabularies, materialized",
                   timings):
            # The horizon's dates and the vocabularies are aggregated while the rows are materialized: no query
            # (and no scan of the materialized rows) of their own.
            observed = Observation("feature pass")
            features = hold(
                sales_features(rows, lookups, as_of, parsed[TEST.name], point_in_time_mode,
                               recent_level.broadcast_levels(input_rows[TRAIN.name] + input_rows[TEST.name])).observe(
                    observed, *row_accounting.horizon_metrics(horizon_row()),
                    *row_accounting.vocabulary_metrics(VOCABULARY_ROW)))
        pass_metrics = observed.get
        windows = horizon_window(row_accounting.horizon_dates(pass_metrics), as_of, validation_rule)
        log.info("windows: %s", windows.as_json())
        classified = classify_sales(features, windows, sample_rate, seed)
        with timed("count rows per outcome", timings):
            # The quarantine query is planned on the driver while the executors count.
            sales_groups, quarantine = concurrently(
                lambda: [row.asDict() for row in row_accounting.outcome_summary(classified).collect()],
                lambda: quarantined_rows(features, lookups, state_names))
        vocabularies, later_values = encode.trained_vocabularies(
            encode.sorted_vocabularies(row_accounting.vocabulary_values(pass_metrics)),
            freshness.first_train_date(facts), windows.last_train_date())
        log.info("vocabulary sizes: %s", encode.vocab_sizes(vocabularies))
        outcomes, problems = row_accounting.file_ledgers(input_rows, sales_groups, lookup_groups)
        log.info("row outcomes per file: %s", outcomes)
        check_rows(input_rows, outcomes, problems, quarantine, max_reject_fraction)
        split_rows = {name: outcomes[SPLIT_SOURCES[name]].get(name, 0) for name in encode.SPLIT_COLUMNS}
        empty = [name for name, rows in split_rows.items() if rows == 0]
        if empty:
            raise RawInputError(f"no rows for the {', '.join(empty)} split(s) with --as-of {as_of} "
                                f"(windows {windows.as_json()}, outcomes {outcomes}).")
        if not any(problems.values()):
            # The ledger counted no quarantined row: rejected/ is written empty (same schema) without a scan.
            quarantine = quarantine.limit(0)
        attempt = storage.new_attempt_uri(out)
        with timed("write splits and rejected rows", timings):
            shards = write_outputs(encode.encode_features(classified, vocabularies, later_values), quarantine, attempt,
                                   num_shards, split_rows, timings)
        with timed("digest the raw files again", timings):
            check_unchanged_since_inspected(raw, inputs)

    metadata = metadata_document(
        vocabularies=vocabularies, sales_groups=sales_groups, split_rows=split_rows, outcomes=outcomes,
        problems=problems, as_of=as_of, windows=windows, point_in_time_mode=point_in_time_mode, inputs=inputs,
        verified=verified, raw=raw, shards=shards, timings=timings,
        columns=column_report(inputs, {TRAIN.name: unreadable}),
        settings={"num_shards": num_shards, "sample_rate": sample_rate, "seed": seed,
                  "max_reject_fraction": max_reject_fraction, "validation_window": validation_rule,
                  "max_staleness_days": max_staleness_days, "allow_unverified_drop": allow_unverified_drop})
    storage.write_json(storage.join(attempt, METADATA_FILE), metadata)
    storage.commit(out, attempt, {"as_of": metadata["as_of"], "row_counts": split_rows})
    log.info("committed %s: %s", attempt, split_rows)
    return metadata


def run(spark: SparkSession, args: argparse.Namespace) -> dict[str, Any]:
    return run_prepare(spark, args.raw, args.out, args.as_of, args.sample_rate, args.seed, args.num_shards,
                       args.max_reject_fraction, args.point_in_time, args.validation_window,
                       args.max_staleness_days, args.allow_unverified_drop)


def main(argv: list[str] | None = None) -> int:
    return run_job("prepare", run, parse_args(argv), (RawInputError, AccountingError))


if __name__ == "__main__":
    sys.exit(main())
