#!/usr/bin/env bash
# The docker-compose stack end to end (scripts/compose/compose_e2e.py): installs and starts the Docker engine if
# needed, builds the images (local bases where no registry answers), brings the stack up, lands a drop, runs the DAG
# through the REST API, checks the forecast, the champion and the logs, and tears everything down with volumes.
#
#   bash scripts/compose_e2e.sh [--evidence FILE] [--kill-worker-during-train] [--keep]
#
# Needs scripts/setup_env.sh's Airflow environment (for boto3 and PyYAML) and root for the engine and debootstrap.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The checkout and the embedded stack's REST client and checkpoint killer (scripts/stack/), importable by the script.
export PYTHONPATH="$ROOT:$ROOT/scripts/stack${PYTHONPATH:+:$PYTHONPATH}"
exec "$ROOT/.venvs/airflow/bin/python" "$ROOT/scripts/compose/compose_e2e.py" "$@"
