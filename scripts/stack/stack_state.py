"""Where one embedded stack keeps its state (var/ or a test's folder), its generated secrets and free ports."""
from __future__ import annotations

import json
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from rossmann_jobs.output_layout import DEFAULT_BUCKET  # noqa: F401  (one definition; the stack's API re-exports it)

REPO = Path(__file__).resolve().parents[2]
JOBS_BIN = REPO / ".venvs" / "jobs" / "bin"
AIRFLOW_BIN = REPO / ".venvs" / "airflow" / "bin"


@dataclass(frozen=True)
class Stack:
    """Where one stack keeps its state; tests use a temporary state dir so they never touch the user's var/."""

    state_dir: Path

    @property
    def airflow_home(self) -> Path:
        return self.state_dir / "airflow"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def lineage_events(self) -> Path:
        """The OpenLineage events of every run, one JSON object a line (the provider's file transport)."""
        return self.state_dir / "lineage" / "events.jsonl"

    @property
    def s3_dir(self) -> Path:
        """The embedded S3's buckets and objects (s3_server.py), kept across stops like Airflow's database."""
        return self.state_dir / "s3"

    @property
    def passwords_file(self) -> Path:
        return self.airflow_home / "simple_auth_manager_passwords.json.generated"

    def pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def read_state(self, name: str) -> str | None:
        path = self.run_dir / name
        return path.read_text().strip() if path.exists() else None

    def write_state(self, name: str, value: str) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / name).write_text(value + "\n")


def default_stack() -> Stack:
    return Stack(Path(os.environ.get("ROSSMANN_STATE_DIR", REPO / "var")).resolve())


def free_port(preferred: int | None = None) -> int:
    """The preferred port if nothing listens on it, else one the kernel picks."""
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RuntimeError("no free port on 127.0.0.1")


def stack_secrets(stack: Stack) -> dict[str, str]:
    """Generated once per state dir (keys added later are filled in); file readable by its owner only."""
    path = stack.state_dir / "secrets.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    generated = {
        "s3_access_key_id": "rossmann-local",
        "s3_secret_access_key": secrets.token_urlsafe(24),
        "jwt_secret": secrets.token_urlsafe(32),
        "api_secret_key": secrets.token_urlsafe(32),
        "admin_password": secrets.token_urlsafe(12),
        "postgres_password": secrets.token_urlsafe(24),
    }
    if set(generated) <= set(stored):
        return stored
    values = {**generated, **stored}
    stack.state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(values, handle)
    return values
