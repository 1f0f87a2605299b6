"""Forecast side of the pipeline: model loading, vectorized inference, submission checks, metrics and report."""
