"""Fault injection from outside the jobs: SIGKILL some processes once a run's checkpoint pointer names epoch >= N.

The tests own the fault; the train job carries no hook for it. One killer for both stacks: the embedded cluster kills
a Horovod rank's processes (tests/dag/rank_killer.py), the compose stack a Spark worker container's main process
(scripts/compose/compose_e2e.py); each passes how to list and read the bucket and how to find the pids.
"""
from __future__ import annotations

import os
import signal
import threading
from datetime import datetime
from typing import Any, Callable

CHECKPOINT_POINTER = "/model/checkpoints/latest.json"   # rossmann_jobs.training.checkpoint, under a run's model output


class CheckpointKiller:
    """Polls the checkpoint pointers under runs_prefix_uri; once one names epoch >= after_epoch and find_pids()
    returns pids, SIGKILLs them once and records when (local time, aware), which pids and the pointer's epoch."""

    def __init__(self, list_keys: Callable[[str], list[str]], read_json: Callable[[str], Any], runs_prefix_uri: str,
                 find_pids: Callable[[], list[int]], after_epoch: int = 1, poll_s: float = 0.5,
                 name: str = "checkpoint-killer"):
        self.list_keys, self.read_json, self.prefix = list_keys, read_json, runs_prefix_uri
        self.find_pids, self.after_epoch, self.poll_s = find_pids, after_epoch, poll_s
        self.killed_pids: list[int] = []
        self.killed_at: datetime | None = None
        self.pointer_epoch: int | None = None    # the newest epoch the pointer named when the processes died
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)
        self._thread.start()

    def checkpointed_epoch(self) -> int | None:
        try:
            pointers = [uri for uri in self.list_keys(self.prefix) if uri.endswith(CHECKPOINT_POINTER)]
            return max((self.read_json(uri)["epoch"] for uri in pointers), default=None)
        except Exception:   # noqa: BLE001 - the bucket is being written; look again at the next poll
            return None

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            epoch = self.checkpointed_epoch()
            if epoch is None or epoch < self.after_epoch:
                continue
            pids = self.find_pids()
            if not pids:
                continue   # not up yet, or already gone
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.killed_pids, self.killed_at = pids, datetime.now().astimezone()
            # Finding the pids can take seconds (docker inspect on a loaded machine), while an epoch can take less:
            # the pointer is read again once they are dead, so pointer_epoch is the newest checkpoint at the kill.
            self.pointer_epoch = max(epoch, self.checkpointed_epoch() or epoch)
            return

    def stop(self, timeout_s: float = 30) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout_s)
