"""A small client of Airflow's public REST API (v2), authenticated like a user: POST /auth/token, then a bearer token.

Standard library only, so that any Python can drive a stack with it (the UI test, scripts/compose/compose_e2e.py)."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request


class AirflowRest:
    """One user's session with an api-server at base_url (e.g. http://127.0.0.1:8080)."""

    def __init__(self, base_url: str, username: str, password: str):
        self.base_url = base_url
        status, body = self.call("POST", "/auth/token", {"username": username, "password": password}, auth=False)
        if status != 201:
            raise AssertionError(f"POST /auth/token as {username}: HTTP {status}: {body}")
        self.token = body["access_token"]

    def call(self, method: str, path: str, body: dict | None = None, auth: bool = True, accept: str | None = None):
        """(HTTP status, decoded JSON or text); HTTP errors are returned, not raised."""
        headers = {"Content-Type": "application/json"}
        if accept:
            headers["Accept"] = accept
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.base_url + path, method=method, headers=headers,
                                         data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw.decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def wait_for(self, predicate, timeout_s: float, what: str, interval_s: float = 5.0):
        """predicate()'s first truthy result, polled every interval_s; AssertionError after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if result := predicate():
                return result
            time.sleep(interval_s)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def run_path(dag_id: str, run: dict) -> str:
    """The REST path of one DAG run (its id quoted: manual run ids hold ':' and '+')."""
    return f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run['dag_run_id'], safe='')}"
