#!/usr/bin/env bash
# The README's test command: set everything up, lint (ruff), then run the job-side and the Airflow-side test suites.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# Debian packages download and install while setup_env.sh builds; each one's output stays in one piece.
SYSTEM_SETUP_LOG=$(mktemp)
trap 'rm -f "$SYSTEM_SETUP_LOG"' EXIT
bash scripts/setup_system.sh >"$SYSTEM_SETUP_LOG" 2>&1 &
system_setup=$!
bash scripts/setup_env.sh || { wait "$system_setup" || true; cat "$SYSTEM_SETUP_LOG"; exit 1; }
system_status=0
wait "$system_setup" || system_status=$?
cat "$SYSTEM_SETUP_LOG"
[ "$system_status" -eq 0 ] || { echo "setup_system.sh failed (its output is above)" >&2; exit 1; }

export PATH="$ROOT/.venvs/jobs/bin:$PATH"   # spark-submit and the jobs' python for subprocesses
status=0
echo "== lint: ruff ([tool.ruff] in pyproject.toml)"
.venvs/jobs/bin/ruff check . || status=$?
echo "== tests: job side (.venvs/jobs)"
.venvs/jobs/bin/python -m pytest tests/jobs -p no:cacheprovider --durations=15 "$@" || status=$?
echo "== tests: Airflow side (.venvs/airflow)"
.venvs/airflow/bin/python -m pytest tests/dag -p no:cacheprovider --durations=15 "$@" || status=$?
exit $status
