"""Fault injection from outside the jobs: SIGKILL one Horovod rank's process once the run has a checkpoint, as the
loss of that rank's node would (scripts/stack/checkpoint_killer.py watches and kills; this finds the rank)."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

from checkpoint_killer import CheckpointKiller  # scripts/stack/checkpoint_killer.py

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


class RankKiller(CheckpointKiller):
    """Watches the run's checkpoint pointer in the stack's S3; once it names epoch >= after_epoch, kills rank once."""

    def __init__(self, stack, runs_prefix_uri: str, rank: int = 1, after_epoch: int = 1, poll_s: float = 0.2):
        self.rank = rank
        super().__init__(stack.list_keys, stack.read_json, runs_prefix_uri, lambda: rank_processes(rank),
                         after_epoch=after_epoch, poll_s=poll_s, name="rank-killer")

    @property
    def killed_at(self) -> datetime | None:
        """Local time, naive, like the jobs' log lines."""
        return None if self._killed_at is None else self._killed_at.replace(tzinfo=None)

    @killed_at.setter
    def killed_at(self, value: datetime | None) -> None:
        self._killed_at = value

    def stop(self) -> None:
        super().stop(timeout_s=10)
