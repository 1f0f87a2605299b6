"""Locate the prepare job's committed features; check their Parquet footers (schema, nulls, index ranges) up front."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rossmann_jobs import storage
from rossmann_jobs.features.spec import CATEGORICAL_COLS, CONTINUOUS_COLS, KEY_COLS, LABEL_COL
from rossmann_jobs.output_layout import METADATA_FILE, TRAIN_DIR, VALIDATION_DIR

EXPECTED_TYPES = {**{col: "int32" for col in CATEGORICAL_COLS},
                  **{col: "float" for col in CONTINUOUS_COLS},  # pyarrow names float32 "float"
                  LABEL_COL: "float"}
TRAINING_COLUMNS = [*CATEGORICAL_COLS, *CONTINUOUS_COLS, LABEL_COL]


class FeatureDataError(ValueError):
    """The prepared features do not follow the contract in rossmann_jobs/features/spec.py."""


@dataclass(frozen=True)
class ParquetUnit:
    """One row group of one Parquet file: the unit a rank reads and shuffles."""
    uri: str
    row_group: int
    rows: int


@dataclass(frozen=True)
class FeatureSet:
    features_uri: str          # the prepare job's output URI, as given
    attempt_uri: str           # the committed attempt under it
    metadata: dict[str, Any]
    train_files: list[str]
    validation_files: list[str]

    @property
    def vocab_sizes(self) -> dict[str, int]:
        return {entry["name"]: int(entry["vocab_size"]) for entry in self.metadata["feature_spec"]["categorical"]}

    @property
    def max_sales(self) -> float:
        return float(self.metadata["max_sales"])


def load_feature_set(features_uri: str) -> FeatureSet:
    """Read metadata.json of the committed features and list the train/validation Parquet files."""
    attempt = storage.committed_uri(features_uri)
    metadata_uri = storage.join(attempt, METADATA_FILE)
    metadata = storage.read_json(metadata_uri)
    check_feature_spec(metadata, metadata_uri)
    train_files = storage.parquet_files(storage.join(attempt, TRAIN_DIR))
    if not train_files:
        raise FeatureDataError(f"{storage.join(attempt, TRAIN_DIR)} holds no Parquet files: re-run the prepare job.")
    return FeatureSet(features_uri, attempt, metadata, train_files,
                      storage.parquet_files(storage.join(attempt, VALIDATION_DIR)))


def check_feature_spec(metadata: dict[str, Any], metadata_uri: str) -> None:
    """The model's inputs are fixed by spec.py; the metadata must describe exactly those columns, in order."""
    spec = metadata.get("feature_spec") or {}
    categorical = [entry.get("name") for entry in spec.get("categorical", [])]
    problems = []
    if categorical != CATEGORICAL_COLS:
        problems.append(f"feature_spec.categorical names {categorical} != expected {CATEGORICAL_COLS}")
    if list(spec.get("continuous", [])) != CONTINUOUS_COLS:
        problems.append(f"feature_spec.continuous {spec.get('continuous')} != expected {CONTINUOUS_COLS}")
    bad_vocab = [entry for entry in spec.get("categorical", []) if int(entry.get("vocab_size") or 0) < 1]
    if bad_vocab:
        problems.append(f"vocab_size missing or < 1 for {bad_vocab[:3]}")
    if not metadata.get("max_sales") or float(metadata["max_sales"]) <= 1:
        problems.append(f"max_sales must be the largest raw Sales (> 1), got {metadata.get('max_sales')!r}")
    if problems:
        raise FeatureDataError(f"{metadata_uri} does not match rossmann_jobs/features/spec.py: " + "; ".join(problems))


def scan_files(file_uris: list[str], vocab_sizes: dict[str, int]) -> list[ParquetUnit]:
    """Check every file's schema, nulls and index ranges from its footer; returns the files' row groups.

    Raises FeatureDataError naming the file, the column and (for bad values) example rows.
    """
    import pyarrow.parquet as pq

    units = []
    for uri in file_uris:
        filesys, path = storage.filesystem(uri)
        with filesys.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            _check_schema(uri, parquet.schema_arrow)
            _check_values(uri, parquet, vocab_sizes)
            meta = parquet.metadata
            units.extend(ParquetUnit(uri, group, meta.row_group(group).num_rows)
                         for group in range(meta.num_row_groups))
    return units


def _check_schema(uri: str, schema) -> None:
    for col in TRAINING_COLUMNS:
        if col not in schema.names:
            raise FeatureDataError(f"{uri}: column {col!r} is missing (columns: {schema.names}); the prepare job "
                                   "must write every column of rossmann_jobs/features/spec.py.")
        actual = str(schema.field(col).type)
        if actual != EXPECTED_TYPES[col]:
            raise FeatureDataError(f"{uri}: column {col!r} has type {actual}, expected {EXPECTED_TYPES[col]} "
                                   "(categorical int32 indices, continuous/label float32).")


def _check_values(uri: str, parquet, vocab_sizes: dict[str, int]) -> None:
    """Nulls and out-of-vocabulary indices, from the footer statistics; rows are read only to show examples."""
    import pyarrow.compute as pc

    meta, names = parquet.metadata, parquet.schema_arrow.names
    for col in TRAINING_COLUMNS:
        stats = [meta.row_group(g).column(names.index(col)).statistics for g in range(meta.num_row_groups)]
        stats = [s for s in stats if s is not None]
        if any(s.has_null_count and s.null_count for s in stats):
            raise FeatureDataError(f"{uri}: column {col!r} has nulls, e.g. rows "
                                   f"{_examples(parquet, col, pc.is_null)}; prepare must fill them (0 / 0.0).")
        if col in vocab_sizes and any(s.has_min_max and (s.min < 0 or s.max >= vocab_sizes[col]) for s in stats):
            size = vocab_sizes[col]
            outside = _examples(parquet, col, lambda values: pc.or_(pc.less(values, 0), pc.greater_equal(values, size)))
            raise FeatureDataError(f"{uri}: column {col!r} holds indices outside 0..{size - 1} (vocab_size in "
                                   f"metadata.json), e.g. rows {outside}; were the Parquet files and metadata.json "
                                   "written by different prepare runs?")


def _examples(parquet, col: str, predicate, limit: int = 3) -> list[dict]:
    keys = [key for key in KEY_COLS if key in parquet.schema_arrow.names]
    table = parquet.read(columns=[*keys, col])
    return table.filter(predicate(table[col])).slice(0, limit).to_pylist()


def rank_units(units: list[ParquetUnit], rank: int, size: int) -> list[ParquetUnit]:
    """The row groups of files[rank::size]: each rank owns whole files, near-equal when the files are."""
    files = list(dict.fromkeys(unit.uri for unit in units))
    mine = set(files[rank::size])
    return [unit for unit in units if unit.uri in mine]
