"""Fault injection from outside the jobs: SIGKILL one Horovod rank's process once the run has a checkpoint, as the
loss of that rank's node would. The test owns the fault; the train job carries no hook for it."""
from __future__ import annotations

import os
import signal
import threading
from datetime import datetime
from pathlib import Path

CHECKPOINT_POINTER = "/model/checkpoints/latest.json"   # rossmann_jobs.training.checkpoint, under a run's model output
RANK_PROCESS = "horovod.spark.task.gloo_exec_fn"         # how horovod.spark.run starts each rank


def rank_processes(rank: int) -> list[int]:
    """Pids of the processes horovod.spark.run started for rank (HOROVOD_RANK in their environment)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if RANK_PROCESS.encode() not in (proc / "cmdline").read_bytes():
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:   # gone, or not ours
            continue
        if f"HOROVOD_RANK={rank}".encode() in environ:
            found.append(int(proc.name))
    return found


class RankKiller:
    """Watches the run's checkpoint pointer in the stack's S3; once it names epoch >= after_epoch, kills rank once."""

    def __init__(self, stack, runs_prefix_uri: str, rank: int = 1, after_epoch: int = 1, poll_s: float = 0.2):
        self.stack, self.prefix, self.rank, self.after_epoch, self.poll_s = (stack, runs_prefix_uri, rank,
                                                                              after_epoch, poll_s)
        self.killed_pids: list[int] = []
        self.killed_at: datetime | None = None      # local time, like the jobs' log lines
        self.pointer_epoch: int | None = None        # what the pointer said when the rank was killed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rank-killer", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            epoch = self._checkpointed_epoch()
            if epoch is None or epoch < self.after_epoch:
                continue
            pids = rank_processes(self.rank)
            if not pids:
                continue   # the rank is not up yet, or already gone
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.killed_pids, self.killed_at, self.pointer_epoch = pids, datetime.now(), epoch
            return

    def _checkpointed_epoch(self) -> int | None:
        try:
            pointers = [uri for uri in self.stack.list_keys(self.prefix) if uri.endswith(CHECKPOINT_POINTER)]
            return max((self.stack.read_json(uri)["epoch"] for uri in pointers), default=None)
        except Exception:   # noqa: BLE001 - the bucket is being written; look again at the next poll
            return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
