"""A job started with spark-submit in its own process group, its output collected line by line as it runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from rossmann_jobs.launch_settings import launch_conf

REPO_ROOT = Path(__file__).resolve().parents[1]


class JobProcess:
    def __init__(self, job: str, args: list[str], env: dict[str, str] | None = None,
                 on_line: Callable[[str], None] | None = None, spark_conf: dict[str, str] | None = None):
        jobs_bin = str(Path(sys.executable).parent)
        full_env = {**os.environ, **(env or {}), "PATH": jobs_bin + os.pathsep + os.environ.get("PATH", ""),
                    "PYTHONPATH": str(REPO_ROOT)}
        # The tests' drops are small: their jobs launch as the DAG launches a small drop's (C1-only JIT, and the
        # class archive that tests/jobs/conftest.py names).
        conf = {**launch_conf(job, train_rows=0), **(spark_conf or {})}
        command = [os.path.join(jobs_bin, "spark-submit"), "--master", "local[2]",
                   "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.ui.enabled=false",
                   *[arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")],
                   str(REPO_ROOT / "rossmann_jobs" / f"{job}.py"), *args]
        # Its own session (process group), so a kill reaches the JVM and its Python workers, as a node loss would.
        self.process = subprocess.Popen(command, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, start_new_session=True)
        self.lines: list[str] = []
        self._on_line = on_line
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)
            if self._on_line:
                self._on_line(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait(self, timeout_s: float) -> int:
        """The exit code; kills the group and raises TimeoutError if the job is still running after timeout_s."""
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"job still running after {timeout_s} s:\n{self.output[-3000:]}") from None
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        """SIGKILL the whole process group (driver JVM, Python driver and workers)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=60)


def event_log_conf(folder: Path) -> dict[str, str]:
    """Settings that make the job write Spark's event log (one JSON event per line) into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": folder.as_uri()}


def spilled_bytes(folder: Path) -> dict[str, int]:
    """Bytes the job's tasks spilled (in memory before, on disk after serialization) and their peak execution
    memory, summed over every task end in the event logs under folder."""
    totals = {"memory_spilled": 0, "disk_spilled": 0, "peak_execution_memory": 0}
    for log_file in folder.iterdir():
        for line in log_file.read_text().splitlines():
            event = json.loads(line)
            if event.get("Event") != "SparkListenerTaskEnd":
                continue
            metrics = event.get("Task Metrics") or {}
            totals["memory_spilled"] += metrics.get("Memory Bytes Spilled", 0)
            totals["disk_spilled"] += metrics.get("Disk Bytes Spilled", 0)
            totals["peak_execution_memory"] = max(totals["peak_execution_memory"],
                                                  metrics.get("Peak Execution Memory", 0))
    return totals
