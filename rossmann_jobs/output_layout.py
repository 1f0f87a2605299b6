"""Where each job's files lie inside its committed output: the names the jobs write and the Airflow side reads.

Standard library only, like commit_protocol: the Airflow environment installs this package without its
dependencies, so the plugins name these files from here instead of spelling them again.
"""
from __future__ import annotations

INDEX_HTML = "index.html"
REPORT_DIR = "report"
REPORT_PAGE = f"{REPORT_DIR}/{INDEX_HTML}"   # one self-contained page (predict's forecast report, score's report)

# prepare: a features attempt
TRAIN_DIR, VALIDATION_DIR, TEST_DIR, REJECTED_DIR = "train", "validation", "test", "rejected"
METADATA_FILE = "metadata.json"

# train: a model attempt (the gate's pinned champion copy has the same layout)
MODEL_DIR, MODEL_FILE, ARTIFACT_FILE = "model", "model.h5", "artifact.json"   # model/model.h5, model/artifact.json
TRAIN_METRICS_FILE, TRAINING_CURVES_FILE = "metrics.json", "training_curves.png"

# predict: a forecast attempt
SUBMISSION_FILE, PREDICTIONS_DIR = "submission.csv", "predictions"
QUANTILES_FILE = "forecast_quantiles.csv"   # Id, Date, Store, P10, P50, P90 (the quantile levels), beside submission

# score: the scores root (one object per write, no attempts)
SCORES_SUMMARY_FILE = "summary.json"


def under(root_uri: str, path: str) -> str:
    """path inside a committed attempt or output root."""
    return f"{root_uri.rstrip('/')}/{path}"
