"""Set-up that talks: scripts/progress.sh's steps report progress, duration and failures, and setup_env.sh --check
refuses a wrong Java or Python in seconds with a message that says what to do."""
from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

import images  # scripts/compose/images.py: the compose test's image pulls and builds
from stack_helpers import REPO_ROOT

PROGRESS = REPO_ROOT / "scripts" / "progress.sh"


def bash(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"set -euo pipefail; . {PROGRESS}; {script}"], capture_output=True,
                          text=True, env={**os.environ, "PROGRESS_EVERY": "1", **env}, timeout=60)


def seconds_said(lines: list[str], prefix: str) -> list[int]:
    """The N of each "<prefix>N s" progress line, checked to grow (under load a poll may come a second late)."""
    said = [int(line[len(prefix):].removesuffix(" s")) for line in lines if line.startswith(prefix)]
    assert said == sorted(set(said)) and all(n >= 1 for n in said), said
    return said


def test_a_long_step_prints_progress_then_its_duration_and_output():
    done = bash('step "waiting" bash -c "echo its-output; sleep 2.5"')
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "== waiting"
    assert len(seconds_said(lines, "   still waiting: ")) >= 2
    assert "its-output" in lines
    assert re.fullmatch(r"   done in [2-9] s: waiting", lines[-1])


def test_a_failed_step_shows_its_output_and_keeps_its_status_and_log():
    done = bash('step "breaking" bash -c "echo what-went-wrong; exit 3"; echo not-reached')
    assert done.returncode == 3
    assert "not-reached" not in done.stdout   # set -e stops at the failed step
    assert "breaking failed after" in done.stderr and "(exit status 3)" in done.stderr
    assert "what-went-wrong" in done.stderr
    log = done.stderr.split("kept in ", 1)[1].split(")", 1)[0]
    assert "what-went-wrong" in open(log).read()
    os.remove(log)


def test_a_quiet_step_hides_its_output_unless_it_fails():
    done = bash('STEP_QUIET=1 step "quiet" echo chatter')
    assert done.returncode == 0 and "chatter" not in done.stdout and "done in" in done.stdout


def test_a_silent_pipe_gets_a_heartbeat():
    done = bash('(echo first; sleep 2.5; echo second) | with_heartbeat "running the DAG"')
    lines = done.stdout.splitlines()
    assert lines[0] == "first" and lines[-1] == "second"
    assert len(seconds_said(lines, "   still running the DAG: ")) >= 2


def longest_silence(script: str, every_s: int) -> tuple[float, list[str]]:
    """The longest wait, in seconds, for a line of the script's output (as bench/bench_demo.py measures the demo's)."""
    process = subprocess.Popen(["bash", "-c", f"set -euo pipefail; . {PROGRESS}; {script}"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env={**os.environ, "PROGRESS_EVERY": str(every_s)})
    lines, last, longest = [], time.monotonic(), 0.0
    for line in process.stdout:
        now = time.monotonic()
        longest, last = max(longest, now - last), now
        lines.append(line.rstrip("\n"))
    assert process.wait(timeout=60) == 0, lines
    return max(longest, time.monotonic() - last), lines


@pytest.mark.parametrize("script", ['step "compiling" sleep 7',
                                    '(echo go; sleep 7; echo end) | with_heartbeat "training"'])
def test_a_silent_command_is_never_silent_for_longer_than_the_interval(script):
    """7 s of silence with a 2 s interval: a line at least every 2 s, plus the poll and a loaded machine's delay."""
    longest, lines = longest_silence(script, 2)
    assert sum("still " in line for line in lines) >= 3, lines
    assert longest < 2 + 1.5, (longest, lines)


def test_a_quiet_image_build_prints_progress_within_its_interval(monkeypatch, capsys):
    monkeypatch.setenv("PROGRESS_EVERY", "0.5")
    with images.heartbeat("building rossmann-forecast-airflow"):
        time.sleep(2.2)   # beats at 0.5, 1.0, 1.5 and 2.0 s; a loaded machine may lose the last
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 3 and all(line.startswith("   still building rossmann-forecast-airflow: ") for line in lines)
    time.sleep(0.6)
    assert capsys.readouterr().out == ""   # it stops with the block


def test_the_default_interval_keeps_the_30_s_promise_with_room_to_spare():
    interval = subprocess.run(["bash", "-c", f"unset PROGRESS_EVERY; . {PROGRESS}; echo $PROGRESS_EVERY"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert int(interval) <= 20   # the README promises a line at least every 30 s


@pytest.fixture
def fake_java(tmp_path):
    """A JAVA_HOME whose java reports the version asked for, as `java -version` does (on stderr)."""
    def make(version: str) -> str:
        home = tmp_path / f"java-{version}"
        (home / "bin").mkdir(parents=True)
        java = home / "bin" / "java"
        java.write_text(f'#!/bin/sh\necho \'openjdk version "{version}" 2024-01-16\' >&2\n')
        java.chmod(0o755)
        return str(home)
    return make


def check(**env: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "setup_env.sh"), "--check"], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=60)
    return done, time.monotonic() - started


@pytest.mark.parametrize("version", ["1.8.0_392", "11.0.22", "17.0.15"])
def test_the_java_versions_spark_runs_on_pass(fake_java, version):
    done, _ = check(JAVA_HOME=fake_java(version), ROSSMANN_MIN_FREE_GIB="0")
    assert done.returncode == 0, done.stderr
    assert "prerequisites OK" in done.stdout


def test_another_java_fails_at_once_saying_what_to_install(fake_java):
    done, seconds = check(JAVA_HOME=fake_java("21.0.2"), ROSSMANN_MIN_FREE_GIB="0")
    assert done.returncode == 1
    assert "Spark 3.5 runs on Java 8, 11 or 17" in done.stderr and "is Java 21" in done.stderr
    assert "openjdk-17-jre-headless" in done.stderr
    assert seconds < 20


def test_a_python_other_than_3_11_fails_with_how_to_get_it(tmp_path):
    python = tmp_path / "python3.12"
    python.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'Python 3.12.1' && exit 0\nexit 1\n")
    python.chmod(0o755)
    done, seconds = check(PYTHON=str(python))
    assert done.returncode == 1
    assert "Python 3.11 exactly is required" in done.stderr and "Python 3.12.1" in done.stderr
    assert "python3.11-venv" in done.stderr and "PYTHON=/path/to/python3.11" in done.stderr
    assert seconds < 20
