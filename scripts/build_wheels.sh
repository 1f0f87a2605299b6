#!/usr/bin/env bash
# Builds the two wheels from the checkout into OUT_DIR: rossmann-jobs (pyproject.toml) and rossmann-forecast, the
# Airflow side (packaging/rossmann-forecast). With the Airflow env's pip and setuptools, offline (no build isolation).
# Also rossmann_jobs.zip, the jobs wheel under the name spark-submit's --py-files needs: Spark puts a shipped
# .zip/.egg/.jar on its executors' Python path, never a .whl (pyspark's SparkContext.PACKAGE_EXTENSIONS), so a
# wheel there reaches only the driver.
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
jobs_wheels=("$OUT"/rossmann_jobs-*.whl)
[ "${#jobs_wheels[@]}" -eq 1 ] || { echo "build_wheels: expected one rossmann_jobs wheel in $OUT" >&2; exit 1; }
cp "${jobs_wheels[0]}" "$OUT/rossmann_jobs.zip"
