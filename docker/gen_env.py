"""Prints a .env for docker-compose.yaml: .env.example with every empty (secret) value filled with a fresh one.

    python3 docker/gen_env.py > .env

Generated secrets use only [A-Za-z0-9_-] (the Fernet key also '='): docker-compose.yaml embeds them in a
PostgreSQL URL and in connection JSON, where other characters would need escaping.
"""
from __future__ import annotations

import base64
import os
import re
import secrets
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1] / ".env.example"
ASSIGNMENT = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")


def fresh_secret(name: str) -> str:
    if name == "AIRFLOW_FERNET_KEY":  # Fernet wants url-safe base64 of 32 random bytes
        return base64.urlsafe_b64encode(os.urandom(32)).decode()
    return secrets.token_urlsafe(24)


def render(template: str) -> str:
    lines = []
    for line in template.splitlines():
        match = ASSIGNMENT.match(line)
        if match and not match["value"].strip():
            line = f"{match['name']}={fresh_secret(match['name'])}"
        lines.append(line)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render(TEMPLATE.read_text()))
