"""Airflow-side helpers of the rossmann_forecast DAG: run planning, S3 outputs, quality gate, sensor, spark-submit."""
