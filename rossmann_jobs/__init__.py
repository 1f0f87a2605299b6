"""PySpark jobs of the Rossmann forecast pipeline: prepare, train (Horovod on Spark) and predict."""

__version__ = "0.1.0"   # of both distributions: rossmann-jobs (pyproject.toml) and rossmann-forecast (packaging/)
