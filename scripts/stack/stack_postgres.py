"""A private PostgreSQL server for Airflow's metadata, as production keeps it (Debian's server binaries)."""
from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from stack_processes import running_pid
from stack_state import Stack, free_port, stack_secrets

DEFAULT_POSTGRES_PORT = 5439
POSTGRES_BIN_GLOB = "/usr/lib/postgresql/*/bin/initdb"   # Debian's server binaries, one folder per major version
POSTGRES_OS_USER = "postgres"
AIRFLOW_DB_ROLE = "airflow"


def postgres_bin_dir() -> Path:
    """The newest Debian PostgreSQL server installed (/usr/lib/postgresql/<major>/bin)."""
    found = [Path(path).parent for path in glob.glob(POSTGRES_BIN_GLOB)]
    if not found:
        raise RuntimeError(f"no PostgreSQL server binaries match {POSTGRES_BIN_GLOB}: install Debian's `postgresql` "
                           "package (scripts/setup_system.sh does)")
    return max(found, key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0)


def as_postgres_user(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run its tools as the `postgres` OS user."""
    return ["runuser", "-u", POSTGRES_OS_USER, "--", *argv] if os.geteuid() == 0 else argv


def postgres_root(stack: Stack) -> Path | None:
    value = stack.read_state("postgres.dir")
    return Path(value) if value else None


def start_postgres(stack: Stack, data_root: Path | None = None, port: int | None = None) -> int:
    """A private PostgreSQL server on 127.0.0.1 (initialised on first use); returns its port.

    data_root (default <state>/postgres) holds the cluster (`data/`), its log and its Unix socket; as root it is
    handed to the `postgres` user, so every folder above it must be traversable by that user (e.g. under /tmp).
    Only that user reaches the socket (trust); TCP logins need a password (scram-sha-256)."""
    if (pid := running_pid(stack, "postgres")) is not None:
        print(f"postgres already running (pid {pid})")
        return int(stack.read_state("postgres.port"))
    root = (data_root or postgres_root(stack) or stack.state_dir / "postgres").resolve()
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    if os.geteuid() == 0:
        shutil.chown(root, POSTGRES_OS_USER, POSTGRES_OS_USER)
    bin_dir, data = postgres_bin_dir(), root / "data"
    if not (data / "PG_VERSION").exists():
        subprocess.run(as_postgres_user([str(bin_dir / "initdb"), "-D", str(data), "-U", POSTGRES_OS_USER,
                                         "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8"]),
                       check=True, stdout=subprocess.DEVNULL, cwd=root)
    port = free_port(port or DEFAULT_POSTGRES_PORT)
    server_options = f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={shlex.quote(str(root))}"
    started = subprocess.run(as_postgres_user([str(bin_dir / "pg_ctl"), "start", "-D", str(data), "-w", "-t", "60",
                                               "-l", str(root / "postgres.log"), "-o", server_options]),
                             capture_output=True, text=True, cwd=root)
    if started.returncode != 0:
        log = root / "postgres.log"
        raise RuntimeError(f"PostgreSQL did not start: {started.stdout}{started.stderr}\n"
                           f"{log.read_text(errors='replace')[-3000:] if log.exists() else ''}")
    stack.write_state("postgres.pid", (data / "postmaster.pid").read_text().splitlines()[0])
    stack.write_state("postgres.port", str(port))
    stack.write_state("postgres.dir", str(root))
    password = stack_secrets(stack)["postgres_password"]
    # Through stdin, so the password is never on a command line.
    run_psql(stack, f"""DO $$ BEGIN
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{AIRFLOW_DB_ROLE}') THEN
            CREATE ROLE {AIRFLOW_DB_ROLE} LOGIN PASSWORD '{password}';
        END IF; END $$;""")
    return port


def run_psql(stack: Stack, sql: str) -> str:
    root, port = postgres_root(stack), stack.read_state("postgres.port")
    result = subprocess.run(as_postgres_user([str(postgres_bin_dir() / "psql"), "-h", str(root), "-p", port, "-U",
                                              POSTGRES_OS_USER, "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qAt"]),
                            input=sql, capture_output=True, text=True, cwd=root)
    if result.returncode != 0:
        raise RuntimeError(f"psql failed: {result.stderr.strip()}")
    return result.stdout


def postgres_database(stack: Stack, name: str) -> str:
    """Create database `name` (if absent) owned by the Airflow role; returns its SQLAlchemy URL."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise ValueError(f"database name {name!r}: use lower-case letters, digits and _")
    if running_pid(stack, "postgres") is None:
        raise RuntimeError("the PostgreSQL server is not running: start it with `stack.py pg-start` first")
    run_psql(stack, f"SELECT 'CREATE DATABASE {name} OWNER {AIRFLOW_DB_ROLE}' "
                    f"WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '{name}')\\gexec\n")
    password = urllib.parse.quote(stack_secrets(stack)["postgres_password"], safe="")
    return (f"postgresql+psycopg2://{AIRFLOW_DB_ROLE}:{password}@127.0.0.1:{stack.read_state('postgres.port')}"
            f"/{name}")


def stop_postgres(stack: Stack) -> bool:
    """pg_ctl stop (fast: disconnects clients) of the server this stack started; False if none was running."""
    pid, root = running_pid(stack, "postgres"), postgres_root(stack)
    stack.pid_file("postgres").unlink(missing_ok=True)
    if pid is None or root is None:
        return False
    subprocess.run(as_postgres_user([str(postgres_bin_dir() / "pg_ctl"), "stop", "-D", str(root / "data"),
                                     "-m", "fast", "-w", "-t", "60"]), check=True, stdout=subprocess.DEVNULL,
                   cwd=root)
    return True
