"""Helpers the tests and the benchmarks share: a job run through spark-submit, Spark event logs, the reference's
preparation."""
