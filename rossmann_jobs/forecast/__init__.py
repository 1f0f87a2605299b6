"""Forecast side of the pipeline: inputs, naive baseline, model or baseline forecast, quantiles, submission, metrics."""
