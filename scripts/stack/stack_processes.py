"""Long-lived processes of the embedded stack: each in its own session, its pid under <state>/run/, stopped by
signalling that process group and nothing broader."""
from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from stack_state import REPO, Stack


def reap(pid: int) -> None:
    """Collect pid's exit status if it is an exited child of ours: until then it is a zombie and looks alive."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def pid_alive(pid: int) -> bool:
    reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_pid(stack: Stack, name: str) -> int | None:
    value = stack.read_state(f"{name}.pid")
    return int(value) if value and pid_alive(int(value)) else None


def start_process(stack: Stack, name: str, argv: list[str], env: dict[str, str]) -> int:
    """Start argv in a new session (its own process group), log to <state>/log/<name>.log, record its pid."""
    if (pid := running_pid(stack, name)) is not None:
        print(f"{name} already running (pid {pid})")
        return pid
    stack.log_dir.mkdir(parents=True, exist_ok=True)
    with open(stack.log_dir / f"{name}.log", "ab") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, cwd=REPO)
    stack.write_state(f"{name}.pid", str(process.pid))
    return process.pid


def stop_processes(stack: Stack, names: list[str], grace_s: float = 20.0) -> list[str]:
    """SIGTERM the process groups started for `names` together, SIGKILL what is left after a grace period.

    Returns the names that were running."""
    groups = {}
    for name in names:
        pid = running_pid(stack, name)
        stack.pid_file(name).unlink(missing_ok=True)
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGTERM)
                groups[name] = pid
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    alive = dict(groups)
    while alive and time.monotonic() < deadline:
        time.sleep(0.3)
        alive = {name: pid for name, pid in alive.items() if group_alive(pid)}
    for pid in alive.values():
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [name for name in names if name in groups]


def group_alive(pgid: int) -> bool:
    reap(pgid)   # a leader we started and that has exited stays a zombie (and "alive") until we reap it
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_process(stack: Stack, name: str, grace_s: float = 20.0) -> bool:
    return bool(stop_processes(stack, [name], grace_s))


def wait_http(url: str, timeout_s: float, name: str, stack: Stack) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            # Not listening yet, or listening before its routes are mounted (uvicorn answers 404 meanwhile).
            if running_pid(stack, name) is None:
                break
            time.sleep(0.5)
    log = stack.log_dir / f"{name}.log"
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise RuntimeError(f"{name} did not answer at {url} within {timeout_s:.0f} s. Log {log}:\n{tail}")
