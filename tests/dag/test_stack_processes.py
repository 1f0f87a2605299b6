"""The embedded stack's process checks: an exited child of ours is not mistaken for a running one."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

from stack_helpers import embedded


def wait_for_exit(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    # poll() would reap the child itself; the zombie must be left for the stack's own checks to find.
    while time.monotonic() < deadline and Path(f"/proc/{process.pid}/stat").read_text().split()[2] != "Z":
        time.sleep(0.05)


def test_an_exited_child_is_neither_a_live_pid_nor_a_live_group():
    for alive in (embedded.pid_alive, embedded.group_alive):
        process = subprocess.Popen(["sleep", "0.2"], start_new_session=True)
        assert alive(process.pid)
        wait_for_exit(process)
        assert not alive(process.pid)


def test_a_process_that_is_not_our_child_is_alive():
    assert embedded.pid_alive(1)
