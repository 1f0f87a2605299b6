#!/usr/bin/env bash
# Idempotent set-up of both environments: .venvs/jobs (Spark/TF/Horovod) and .venvs/airflow (Airflow).
# Slow artefacts (the horovod wheel, the S3A jars) are cached outside the clone, so later clones reuse them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ROSSMANN_CACHE:-$HOME/.cache/rossmann-forecast}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
HOROVOD_VERSION=0.28.1
HOROVOD_EXTRAS=tensorflow-cpu   # not [spark]: see requirements-jobs.txt
TF_VERSION=2.15.1
SAGEMAKER_PYSPARK=1.4.5   # its sdist ships hadoop-aws-3.3.1.jar + aws-java-sdk-bundle-1.11.901.jar (no Maven here)
S3A_JARS=(hadoop-aws-3.3.1.jar aws-java-sdk-bundle-1.11.901.jar)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off TF_CPP_MIN_LOG_LEVEL=2

say() { printf '\n== setup: %s\n' "$*"; }
die() { printf 'setup error: %s\n' "$*" >&2; exit 1; }

check_prerequisites() {
  "$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null \
    || die "Python 3.11 is required (found: $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.11"
  command -v java >/dev/null || die "Java 17 is required for Spark (install openjdk-17-jre-headless)"
  command -v c++ >/dev/null || command -v g++ >/dev/null || die "a C++ compiler is required to build horovod (install g++)"
}

# A stamp of the inputs that define an env: re-install only when they change.
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

ensure_venv() {  # ensure_venv DIR
  [ -x "$1/bin/python" ] || "$PYTHON" -m venv "$1"
  "$1/bin/pip" install -q --upgrade "pip>=24" wheel "setuptools>=78.1.1"
}

build_horovod_wheel() {  # prints the cached wheel path; builds it (~9 min on 2 cores) if absent
  local dir="$CACHE/wheels/tf-$TF_VERSION"
  local wheel
  wheel=$(ls "$dir"/horovod-$HOROVOD_VERSION-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    say "building horovod $HOROVOD_VERSION against tensorflow-cpu $TF_VERSION (about 9 minutes, cached in $dir)" >&2
    mkdir -p "$dir"
    # cmake 4 dropped compatibility with gloo's cmake_minimum_required; pin 3.x for the build only.
    "$JOBS/bin/pip" install -q "cmake>=3.20,<4" packaging >&2
    env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
        HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" PATH="$JOBS/bin:$PATH" \
        "$JOBS/bin/pip" wheel -q --no-build-isolation --no-deps --no-cache-dir "horovod==$HOROVOD_VERSION" -w "$dir" >&2
    wheel=$(ls "$dir"/horovod-$HOROVOD_VERSION-*.whl | head -n 1)
  fi
  echo "$wheel"
}

install_s3a_jars() {  # copies the S3A jars into pyspark's own jars/ folder, like adding them to $SPARK_HOME/jars
  local jar_cache="$CACHE/jars" pyspark_jars
  pyspark_jars="$("$JOBS/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
  if ! ls "$jar_cache/${S3A_JARS[0]}" "$jar_cache/${S3A_JARS[1]}" >/dev/null 2>&1; then
    say "fetching the S3A jars from the sagemaker-pyspark $SAGEMAKER_PYSPARK package on PyPI"
    local tmp; tmp=$(mktemp -d)
    "$JOBS/bin/pip" download -q --no-deps --no-binary :all: "sagemaker-pyspark==$SAGEMAKER_PYSPARK" -d "$tmp"
    mkdir -p "$jar_cache"
    for jar in "${S3A_JARS[@]}"; do
      tar -xzf "$tmp"/sagemaker_pyspark-*.tar.gz -C "$tmp" --wildcards "*/deps/jars/$jar"
      cp "$tmp"/sagemaker_pyspark-*/deps/jars/"$jar" "$jar_cache/"
    done
    rm -rf "$tmp"
  fi
  for jar in "${S3A_JARS[@]}"; do [ -f "$pyspark_jars/$jar" ] || cp "$jar_cache/$jar" "$pyspark_jars/"; done
}

setup_jobs_env() {
  JOBS="$ROOT/.venvs/jobs"
  local stamp; stamp=$(stamp_of "$ROOT/requirements-jobs.txt" "$ROOT/constraints/jobs.txt" "$0")
  if [ "$(cat "$JOBS/.stamp" 2>/dev/null)" = "$stamp" ]; then say "jobs env up to date"; return; fi
  say "jobs env: $JOBS"
  ensure_venv "$JOBS"
  "$JOBS/bin/pip" install -q -r "$ROOT/requirements-jobs.txt" -c "$ROOT/constraints/jobs.txt"
  local wheel; wheel=$(build_horovod_wheel)
  "$JOBS/bin/pip" install -q "${wheel}[$HOROVOD_EXTRAS]" -c "$ROOT/constraints/jobs.txt"
  "$JOBS/bin/pip" install -q --no-deps -e "$ROOT"
  install_s3a_jars
  "$JOBS/bin/python" -c 'import numpy, tensorflow, pyspark; assert numpy.__version__.startswith("1."), numpy.__version__; assert pyspark.__version__.startswith("3.5"), pyspark.__version__'
  local build; build=$("$JOBS/bin/horovodrun" --check-build)
  echo "$build" | grep -q '\[X\] TensorFlow' || die "horovod was built without TensorFlow: $build"
  echo "$build" | grep -q '\[X\] Gloo' || die "horovod was built without Gloo: $build"
  echo "$stamp" > "$JOBS/.stamp"
  say "jobs env ready (horovod with TensorFlow + Gloo)"
}

setup_airflow_env() {
  local AIRFLOW_ENV="$ROOT/.venvs/airflow"
  local stamp; stamp=$(stamp_of "$ROOT/requirements.txt" "$ROOT/constraints/airflow.txt" "$0")
  if [ "$(cat "$AIRFLOW_ENV/.stamp" 2>/dev/null)" = "$stamp" ]; then say "airflow env up to date"; return; fi
  say "airflow env: $AIRFLOW_ENV"
  ensure_venv "$AIRFLOW_ENV"
  "$AIRFLOW_ENV/bin/pip" install -q -r "$ROOT/requirements.txt" -c "$ROOT/constraints/airflow.txt"
  # The plugins import the protocols the jobs write (rossmann_jobs/commit_protocol.py, job_protocol.py: standard
  # library only); the package declares no dependencies, and --no-deps keeps it that way.
  "$AIRFLOW_ENV/bin/pip" install -q --no-deps -e "$ROOT"
  "$AIRFLOW_ENV/bin/python" -c 'import airflow.sdk, airflow.providers.apache.spark, airflow.providers.amazon'
  "$AIRFLOW_ENV/bin/python" -c 'import rossmann_jobs.commit_protocol, rossmann_jobs.job_protocol'
  echo "$stamp" > "$AIRFLOW_ENV/.stamp"
  say "airflow env ready"
}

check_prerequisites
# The airflow env (downloads and unpacking) installs while the jobs env compiles horovod on every core; its
# output is shown after the jobs env's, so the two do not interleave.
AIRFLOW_SETUP_LOG=$(mktemp)
trap 'rm -f "$AIRFLOW_SETUP_LOG"' EXIT
setup_airflow_env >"$AIRFLOW_SETUP_LOG" 2>&1 &
airflow_setup=$!
setup_jobs_env || { wait "$airflow_setup" || true; cat "$AIRFLOW_SETUP_LOG"; exit 1; }
airflow_status=0
wait "$airflow_setup" || airflow_status=$?
cat "$AIRFLOW_SETUP_LOG"
[ "$airflow_status" -eq 0 ] || die "the airflow env failed to install (its output is above)"
