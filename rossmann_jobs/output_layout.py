"""Where each job's files lie inside its committed output: the names the jobs write and the Airflow side reads.

Standard library only, like commit_protocol: the Airflow environment installs this package without its
dependencies, so the plugins name these files from here instead of spelling them again.
"""
from __future__ import annotations

import os

INDEX_HTML = "index.html"
REPORT_DIR = "report"
REPORT_PAGE = f"{REPORT_DIR}/{INDEX_HTML}"   # one self-contained page (predict's forecast report, score's report)

# prepare: a features attempt
TRAIN_DIR, VALIDATION_DIR, TEST_DIR, REJECTED_DIR = "train", "validation", "test", "rejected"
METADATA_FILE = "metadata.json"

# train: a model attempt (the gate's pinned champion copy has the same layout). A model is data: artifact.json names
# the params the code builds it from, weights.npz holds its weights (rossmann_jobs/model/files.py); MODEL_FILES are
# what a champion record's SHA-256 digests cover. LEGACY_MODEL_FILE is the whole-model HDF5 file of earlier releases:
# named only to refuse it, never read (Keras deserializes code from it).
MODEL_DIR, MODEL_WEIGHTS_FILE, ARTIFACT_FILE = "model", "weights.npz", "artifact.json"
MODEL_FILES = (f"{MODEL_DIR}/{ARTIFACT_FILE}", f"{MODEL_DIR}/{MODEL_WEIGHTS_FILE}")
LEGACY_MODEL_FILE = "model.h5"
TRAIN_METRICS_FILE, TRAINING_CURVES_FILE = "metrics.json", "training_curves.png"

# predict: a forecast attempt
SUBMISSION_FILE, PREDICTIONS_DIR = "submission.csv", "predictions"
QUANTILES_FILE = "forecast_quantiles.csv"   # Id, Date, Store, P10, P50, P90 (the quantile levels), beside submission
# The summary's forecast_model when no model may forecast the date and the naive seasonal baseline does (predict
# --model ""); the gate's XCom, forecast/latest.json and the registry name it the same.
NAIVE_FORECAST_MODEL = "naive-seasonal"

# score: the scores root (one object per write, no attempts)
SCORES_SUMMARY_FILE = "summary.json"


# The bucket every side uses (the DAG's URIs, the jobs' model-location check): env ROSSMANN_BUCKET. Models are loaded
# only from its MODEL_PREFIXES (the gate's pinned champions, the runs' own train outputs).
BUCKET_ENV, DEFAULT_BUCKET = "ROSSMANN_BUCKET", "rossmann"
MODEL_PREFIXES = ("models", "runs")


def configured_bucket() -> str:
    return os.environ.get(BUCKET_ENV) or DEFAULT_BUCKET


def under(root_uri: str, path: str) -> str:
    """path inside a committed attempt or output root."""
    return f"{root_uri.rstrip('/')}/{path}"
