"""Sensor for a day's raw data drop: waits for its `_SUCCESS` marker and fails with an actionable message."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.amazon.aws.sensors.s3 import S3KeySensor
from airflow.sdk.exceptions import AirflowSensorTimeout

# What to do about a missing drop: said when the wait starts and again when it times out.
LAND_HINT = ("The drop is complete once its _SUCCESS marker is written (after the 7 CSV files). Land it "
             "(e.g. `python -m rossmann_jobs.synth land --out s3://<bucket>/raw --from-date D --to-date D`)")


def poke_interval_for(timeout_s: float) -> float:
    """About 20 pokes per timeout, between 5 s and 5 min: short test timeouts still poke a few times."""
    return min(300.0, max(5.0, timeout_s / 20.0))


class RawDropSensor(S3KeySensor):
    """S3KeySensor whose timeout can come from a run param (so a trigger can shorten it) and whose timeout says what
    to do. Deferrable (S3KeyTrigger on the triggerer, aiobotocore) where Airflow's `[operators] default_deferrable`
    is on, as in the embedded stack and compose; otherwise it pokes in reschedule mode. Both free the worker slot
    between checks."""

    def __init__(self, *, timeout_param: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")   # used only when not deferrable
        super().__init__(**kwargs)
        self.timeout_param = timeout_param

    def _configured_timeout(self, context) -> float:
        configured = context["params"].get(self.timeout_param) if self.timeout_param else None
        return float(configured) if configured is not None else float(self.timeout)

    def _timed_out(self, context, timeout: AirflowSensorTimeout) -> AirflowSensorTimeout:
        return AirflowSensorTimeout(
            f"No raw data drop arrived: {self.bucket_key} did not appear within {self._configured_timeout(context):.0f}"
            f" s. {LAND_HINT}, then clear this task to run again.")

    def execute(self, context) -> None:
        # Read before deferring too: the trigger's timeout and poke interval are taken from these.
        self.timeout = self._configured_timeout(context)
        self.poke_interval = poke_interval_for(self.timeout)
        # Said first, so that the log of a run waiting in the UI (a first unpause: yesterday's drop) names its key.
        until = datetime.now(timezone.utc) + timedelta(seconds=self.timeout)
        self.log.info("Waiting for %s, checking every %.0f s, until %s (raw_drop_timeout_s %.0f s); then this run "
                      "fails. %s, or mark this run failed.", self.bucket_key, self.poke_interval,
                      until.strftime("%Y-%m-%d %H:%M UTC"), self.timeout, LAND_HINT)
        try:
            super().execute(context)
        except AirflowSensorTimeout as timeout:
            raise self._timed_out(context, timeout) from timeout

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context) -> Any:
        """A deferred wait that timed out comes back here (not through execute) as AirflowSensorTimeout."""
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except AirflowSensorTimeout as timeout:
            raise self._timed_out(context, timeout) from timeout
