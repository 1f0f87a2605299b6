#!/usr/bin/env bash
# Builds the two wheels from the checkout into OUT_DIR: rossmann-jobs (pyproject.toml) and rossmann-forecast, the
# Airflow side (packaging/rossmann-forecast). With the Airflow env's pip and setuptools, offline (no build isolation).
#   scripts/build_wheels.sh OUT_DIR
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:?usage: scripts/build_wheels.sh OUT_DIR}"
PIP="${PIP:-$ROOT/.venvs/airflow/bin/pip}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
# From a copy of the sources both projects read: setuptools writes build/ and *.egg-info beside each project and
# never removes a file from build/ (a stale one would ship a deleted module); the checkout stays as it is.
SRC="$(mktemp -d)"
trap 'rm -rf "$SRC"' EXIT
tar -C "$ROOT" --exclude=__pycache__ --exclude='*.egg-info' --exclude=build \
  -cf - pyproject.toml rossmann_jobs plugins dags packaging | tar -C "$SRC" -xf -
PIP_DISABLE_PIP_VERSION_CHECK=1 "$PIP" wheel -q --no-build-isolation --no-deps --no-index -w "$OUT" \
  "$SRC" "$SRC/packaging/rossmann-forecast"
