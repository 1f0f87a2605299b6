#!/usr/bin/env bash
# Builds the two wheels from the checkout into OUT_DIR: rossmann-jobs (pyproject.toml) and rossmann-forecast, the
# Airflow side (packaging/rossmann-forecast). With the Airflow env's pip and setuptools, offline (no build isolation).
#   scripts/build_wheels.sh OUT_DIR
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:?usage: scripts/build_wheels.sh OUT_DIR}"
PIP="${PIP:-$ROOT/.venvs/airflow/bin/pip}"
# setuptools copies sources into build/ and never removes a file from there: a stale build/ would ship deleted modules.
rm -rf "$ROOT/build" "$ROOT/packaging/rossmann-forecast/build"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$PIP" wheel -q --no-build-isolation --no-deps --no-index -w "$OUT" \
  "$ROOT" "$ROOT/packaging/rossmann-forecast"
rm -rf "$ROOT/build" "$ROOT/packaging/rossmann-forecast/build"
