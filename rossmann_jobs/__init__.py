"""PySpark jobs of the Rossmann forecast pipeline: prepare, train (Horovod on Spark) and predict."""
