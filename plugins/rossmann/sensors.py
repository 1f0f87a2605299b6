"""Sensor for a day's raw data drop: waits for its `_SUCCESS` marker and fails with an actionable message."""
from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.sensors.s3 import S3KeySensor
from airflow.sdk.exceptions import AirflowSensorTimeout


def poke_interval_for(timeout_s: float) -> float:
    """About 20 pokes per timeout, between 5 s and 5 min: short test timeouts still poke a few times."""
    return min(300.0, max(5.0, timeout_s / 20.0))


class RawDropSensor(S3KeySensor):
    """S3KeySensor in reschedule mode whose timeout can come from a run param (so a trigger can shorten it)."""

    def __init__(self, *, timeout_param: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.timeout_param = timeout_param

    def execute(self, context) -> None:
        configured = context["params"].get(self.timeout_param) if self.timeout_param else None
        if configured is not None:
            self.timeout = float(configured)
            self.poke_interval = poke_interval_for(self.timeout)
        try:
            super().execute(context)
        except AirflowSensorTimeout as timeout:
            raise AirflowSensorTimeout(
                f"No raw data drop arrived: {self.bucket_key} did not appear within {self.timeout:.0f} s. "
                "The drop is complete once its _SUCCESS marker is written (after the 7 CSV files). Land it "
                "(e.g. `python -m rossmann_jobs.synth land --out s3://<bucket>/raw --from-date D --to-date D`), "
                "then clear this task to run again."
            ) from timeout
