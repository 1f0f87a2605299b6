#!/usr/bin/env bash
# The README's test command: set everything up, then run the job-side and the Airflow-side test suites.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_env.sh
bash scripts/setup_system.sh

export PATH="$ROOT/.venvs/jobs/bin:$PATH"   # spark-submit and the jobs' python for subprocesses
status=0
echo "== tests: job side (.venvs/jobs)"
.venvs/jobs/bin/python -m pytest tests/jobs -p no:cacheprovider --durations=15 "$@" || status=$?
echo "== tests: Airflow side (.venvs/airflow)"
.venvs/airflow/bin/python -m pytest tests/dag -p no:cacheprovider --durations=15 "$@" || status=$?
exit $status
