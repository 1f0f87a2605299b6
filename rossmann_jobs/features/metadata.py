"""metadata.json of a prepare output: what the features are, where every input row went, the as-of windows and
the inputs they came from. Pure: built from the plain values the job collected."""
from __future__ import annotations

from datetime import date, datetime, timezone
from typing import Any, Mapping

from rossmann_jobs.features import encode, point_in_time, row_accounting, split

REJECTED_FORMAT = "JSON lines: file, reason, column, record"


def row_counts(split_rows: Mapping[str, int], outcomes: Mapping[str, Mapping[str, int]],
               problems: Mapping[str, Mapping[tuple[str, str], int]]) -> dict[str, Any]:
    """Rows per split, quarantined rows in all, each file's ledger and its quarantine reasons."""
    return {**split_rows, "rejected": sum(sum(p.values()) for p in problems.values()),
            "files": outcomes,
            "quarantine_reasons": {name: {f"{reason} [{column}]": rows
                                          for (reason, column), rows in file_problems.items()}
                                   for name, file_problems in problems.items() if file_problems}}


def metadata_document(*, vocabularies: dict[str, list], sales_groups: list[Mapping[str, Any]],
                      split_rows: Mapping[str, int], outcomes: Mapping[str, Mapping[str, int]],
                      problems: Mapping[str, Mapping[tuple[str, str], int]], as_of: date, windows: split.Windows,
                      point_in_time_mode: str, inputs: Mapping[str, Mapping[str, Any]], verified: bool, raw: str,
                      shards: dict[str, list[dict[str, Any]]], settings: Mapping[str, Any],
                      timings: Mapping[str, float], columns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole document; settings holds the job's num_shards, sample_rate, seed, max_reject_fraction and
    validation_window (the rule's name); columns: per raw file with any, its ignored and absent columns and its
    unused columns' rows without a usable value (features/row_checks.column_report)."""
    return {
        "feature_spec": encode.feature_spec(vocabularies),
        "vocabularies": vocabularies,
        "max_sales": row_accounting.max_sales(sales_groups),
        "row_counts": row_counts(split_rows, outcomes, problems),
        "as_of": as_of.isoformat(),
        "test_window": {"start": windows.test_start.isoformat(), "end": windows.test_end.isoformat()},
        "validation_window": {"start": windows.validation_start.isoformat(),
                              "end": windows.validation_end.isoformat(), "rule": windows.validation_rule,
                              "name": settings["validation_window"]},
        "point_in_time": point_in_time.describe(point_in_time_mode),
        "input_checksums": {name: {"sha256": facts["sha256"], "bytes": facts["bytes"]}
                            for name, facts in inputs.items()},
        "input_columns": dict(columns or {}),   # {} when every file holds exactly the drop's columns
        "drop_verified": verified,   # the checksums above matched the drop's _SUCCESS manifest
        "raw": raw,
        "num_shards": settings["num_shards"],
        "shards": shards,
        "sample_rate": settings["sample_rate"],
        "seed": settings["seed"],
        "max_reject_fraction": settings["max_reject_fraction"],
        "max_staleness_days": settings.get("max_staleness_days"),
        "allow_unverified_drop": settings.get("allow_unverified_drop"),
        "rejected_format": REJECTED_FORMAT,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "timings_s": dict(timings),
    }
