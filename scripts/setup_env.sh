#!/usr/bin/env bash
# Idempotent set-up of both environments: .venvs/jobs (Spark/TF/Horovod) and .venvs/airflow (Airflow).
# Slow artefacts (the horovod wheel, the S3A jars) are cached outside the clone, so later clones reuse them.
#   scripts/setup_env.sh [--check]   (--check: only the prerequisite checks: Python 3.11, Java 8/11/17, C++, disk)
#   scripts/setup_env.sh --executor-env-archive   (after a set-up: prints the packed executor environment's path,
#                                                  building it first if its inputs changed; docs/deploy.md option 3)
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

MIN_FREE_GIB="${ROSSMANN_MIN_FREE_GIB:-8}"   # the two envs take ~3.5 GiB, pip's downloads and the build more
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off TF_CPP_MIN_LOG_LEVEL=2
# shellcheck source=scripts/progress.sh
. "$ROOT/scripts/progress.sh"

say() { printf '\n== setup: %s\n' "$*"; }
die() { printf 'setup error: %s\n' "$*" >&2; exit 1; }

PYTHON_HOWTO="Debian 12: apt-get install python3.11 python3.11-venv; Ubuntu: add-apt-repository ppa:deadsnakes/ppa, \
then apt-get install python3.11 python3.11-venv; elsewhere: pyenv install 3.11 or uv python install 3.11. Then run \
again with PYTHON=/path/to/python3.11 if it is not on PATH as python3.11"

# The Java Spark will run: $JAVA_HOME/bin/java when JAVA_HOME is set (as spark-submit does), else java on PATH.
java_major() {  # prints the major version (8 for "1.8.0_392", 17 for "17.0.15"); nothing if there is no java
  local java="${JAVA_HOME:+$JAVA_HOME/bin/}java" version
  version=$("$java" -version 2>&1 | sed -n 's/.* version "\([^"]*\)".*/\1/p' | head -n 1) || return 0
  case "$version" in 1.*) version=${version#1.} ;; esac
  echo "${version%%[._-]*}"
}

free_gib() { df -Pk "$1" | awk 'NR == 2 { print int($4 / 1048576) }'; }

check_prerequisites() {  # everything the set-up needs, checked in its first seconds
  command -v "$PYTHON" >/dev/null 2>&1 || die "Python 3.11 is required and $PYTHON was not found. $PYTHON_HOWTO"
  "$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null \
    || die "Python 3.11 exactly is required (TensorFlow 2.15 and horovod 0.28.1 build for it; found: \
$("$PYTHON" --version 2>&1) at $(command -v "$PYTHON")). $PYTHON_HOWTO"
  "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null \
    || die "$PYTHON cannot create virtual environments: install python3.11-venv (apt-get install python3.11-venv)"
  local java; java=$(java_major)
  case "$java" in
    8|11|17) ;;
    "") die "Java is required for Spark 3.5 (8, 11 or 17): apt-get install openjdk-17-jre-headless, or set JAVA_HOME" ;;
    *) die "Spark 3.5 runs on Java 8, 11 or 17, but ${JAVA_HOME:+\$JAVA_HOME/bin/}java is Java $java: install \
openjdk-17-jre-headless and put it first on PATH (update-alternatives --config java), or set JAVA_HOME to it" ;;
  esac
  command -v c++ >/dev/null || command -v g++ >/dev/null || die "a C++ compiler is required to build horovod (install g++)"
  if [ "$(cat "$ROOT/.venvs/jobs/.stamp" 2>/dev/null)" != "$(jobs_stamp)" ] \
      || [ "$(cat "$ROOT/.venvs/airflow/.stamp" 2>/dev/null)" != "$(airflow_stamp)" ]; then
    mkdir -p "$ROOT/.venvs"
    local free; free=$(free_gib "$ROOT/.venvs")
    [ "$free" -ge "$MIN_FREE_GIB" ] || die "only $free GiB free under $ROOT/.venvs; installing the environments \
needs about $MIN_FREE_GIB GiB (ROSSMANN_MIN_FREE_GIB overrides the check)"
  fi
}

# A stamp of the inputs that define an env: re-install only when they change.
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }
jobs_stamp() { stamp_of "$ROOT/requirements-jobs-dev.txt" "$ROOT/requirements-jobs.txt" "$ROOT/requirements-executors.txt" "$ROOT/constraints/jobs.txt" "$0"; }
executor_env_stamp() { stamp_of "$ROOT/requirements-executors.txt" "$ROOT/constraints/jobs.txt" "$0"; }
airflow_stamp() { stamp_of "$ROOT/requirements-dev.txt" "$ROOT/requirements.txt" "$ROOT/constraints/airflow.txt" "$0"; }

ensure_venv() {  # ensure_venv DIR
  [ -x "$1/bin/python" ] || "$PYTHON" -m venv "$1"
  "$1/bin/pip" install -q --upgrade "pip>=24" wheel "setuptools>=78.1.1"
}

horovod_wheel() { ls "$CACHE/wheels/tf-$TF_VERSION"/horovod-$HOROVOD_VERSION-*.whl 2>/dev/null | head -n 1 || true; }

build_horovod_wheel() {  # into the cache, outside the clone (~4-9 min on 2 cores)
  local dir="$CACHE/wheels/tf-$TF_VERSION"
  mkdir -p "$dir"
  # cmake 4 dropped compatibility with gloo's cmake_minimum_required; pin 3.x for the build only.
  "$JOBS/bin/pip" install -q "cmake>=3.20,<4" packaging
  env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
      HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" PATH="$JOBS/bin:$PATH" \
      "$JOBS/bin/pip" wheel -q --no-build-isolation --no-deps --no-cache-dir "horovod==$HOROVOD_VERSION" -w "$dir"
  [ -n "$(horovod_wheel)" ] || die "pip built no horovod wheel into $dir"
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

check_jobs_env() {  # the versions the jobs need, and horovod built with TensorFlow and Gloo
  "$JOBS/bin/python" -c 'import numpy, tensorflow, pyspark; assert numpy.__version__.startswith("1."), numpy.__version__; assert pyspark.__version__.startswith("3.5"), pyspark.__version__'
  local build; build=$("$JOBS/bin/horovodrun" --check-build)
  echo "$build" | grep -q '\[X\] TensorFlow' || die "horovod was built without TensorFlow: $build"
  echo "$build" | grep -q '\[X\] Gloo' || die "horovod was built without Gloo: $build"
}

# Each step below prints its name, a line every 20 s while it runs and its duration (scripts/progress.sh); called
# without `||`, so that `set -e` stops at the first failed step.
setup_jobs_env() {
  JOBS="$ROOT/.venvs/jobs"
  local stamp; stamp=$(jobs_stamp)
  if [ "$(cat "$JOBS/.stamp" 2>/dev/null)" = "$stamp" ]; then say "jobs env up to date"; return; fi
  say "jobs env: $JOBS"
  step "jobs env: virtualenv, pip, wheel, setuptools" ensure_venv "$JOBS"
  step "jobs env: installing requirements-jobs-dev.txt (pyspark, tensorflow-cpu, pandas, ..., the test tools; a few minutes)" \
    install_pinned "$JOBS" "$ROOT/requirements-jobs-dev.txt"
  if [ -z "$(horovod_wheel)" ]; then
    step "jobs env: building horovod $HOROVOD_VERSION against tensorflow-cpu $TF_VERSION (4-9 min on 2 cores, \
cached in $CACHE/wheels)" build_horovod_wheel
  fi
  step "jobs env: installing horovod from $(horovod_wheel)" install_horovod "$JOBS"
  step "jobs env: installing this package (editable)" "$JOBS/bin/pip" install -q --no-deps -e "$ROOT"
  step "jobs env: S3A jars into pyspark (from sagemaker-pyspark $SAGEMAKER_PYSPARK, cached in $CACHE/jars)" \
    install_s3a_jars
  step "jobs env: checking numpy, pyspark and horovod's build" check_jobs_env
  echo "$stamp" > "$JOBS/.stamp"
  say "jobs env ready (horovod with TensorFlow + Gloo)"
}

# The executors' Python environment as one archive for spark.archives (docs/deploy.md, option 3): a fresh,
# non-editable venv of requirements-executors.txt and the horovod wheel, packed by venv-pack (the tool Spark's
# docs name); cached in $CACHE by its inputs, so a set-up builds it once. Not the package itself: jobs ship it as
# `make dist`'s rossmann_jobs.zip with --py-files, so the archive changes only with the pins. The archive links the interpreter of $PYTHON: the nodes
# need Python 3.11 at that path (venv-pack's --python-prefix names another).
executor_env_archive() {  # prints the archive's path
  local archive="$CACHE/executor-env/rossmann-executor-env-$(executor_env_stamp).tar.gz"
  if [ ! -f "$archive" ]; then
    [ -n "$(horovod_wheel)" ] || die "no horovod wheel in $CACHE/wheels/tf-$TF_VERSION: run scripts/setup_env.sh first"
    [ -x "$ROOT/.venvs/jobs/bin/venv-pack" ] || die "venv-pack is not in .venvs/jobs: run scripts/setup_env.sh first"
    local build; build=$(mktemp -d)
    # shellcheck disable=SC2064  # expand $build now: the trap outlives this function's locals
    trap "rm -rf '$build'" EXIT
    step "executor env: installing requirements-executors.txt and horovod into a fresh venv" \
      install_executor_env "$build/env"
    mkdir -p "$(dirname "$archive")"
    # TensorFlow's C++ headers (a third of the files) only serve compiling against it, which horovod's wheel did.
    step "executor env: packing with venv-pack" "$ROOT/.venvs/jobs/bin/venv-pack" -q -p "$build/env" \
      -o "$archive.partial" --format tar.gz --compress-level 1 --force \
      --exclude 'lib/python3.*/site-packages/tensorflow/include/*'
    mv "$archive.partial" "$archive"   # whole or not at all: a later run trusts any archive it finds
    find "$(dirname "$archive")" -name 'rossmann-executor-env-*.tar.gz' ! -path "$archive" -delete   # older pins
  fi
  echo "$archive"
}

install_pinned() {  # install_pinned VENV REQUIREMENTS: a requirements file under the jobs' constraints
  "$1/bin/pip" install -q -r "$2" -c "$ROOT/constraints/jobs.txt"
}

install_horovod() {  # install_horovod VENV: the cached horovod wheel with its TensorFlow extra
  "$1/bin/pip" install -q "$(horovod_wheel)[$HOROVOD_EXTRAS]" -c "$ROOT/constraints/jobs.txt"
}

install_executor_env() {  # install_executor_env VENV
  ensure_venv "$1"
  install_pinned "$1" "$ROOT/requirements-executors.txt"
  install_horovod "$1"
  "$1/bin/python" -c 'import tensorflow, pyarrow, horovod.tensorflow' >/dev/null
}

setup_airflow_env() {
  local AIRFLOW_ENV="$ROOT/.venvs/airflow"
  local stamp; stamp=$(airflow_stamp)
  if [ "$(cat "$AIRFLOW_ENV/.stamp" 2>/dev/null)" = "$stamp" ]; then say "airflow env up to date"; return; fi
  say "airflow env: $AIRFLOW_ENV"
  step "airflow env: virtualenv, pip, wheel, setuptools" ensure_venv "$AIRFLOW_ENV"
  step "airflow env: installing requirements-dev.txt (Airflow, its providers, the test tools; a few minutes)" \
    "$AIRFLOW_ENV/bin/pip" install -q -r "$ROOT/requirements-dev.txt" -c "$ROOT/constraints/airflow.txt"
  # The plugins import the protocols the jobs write (rossmann_jobs/commit_protocol.py, job_protocol.py: standard
  # library only); the package declares no dependencies, and --no-deps keeps it that way.
  step "airflow env: installing this package (editable, no dependencies)" \
    "$AIRFLOW_ENV/bin/pip" install -q --no-deps -e "$ROOT"
  step "airflow env: the embedded stack's command, rossmann-stack (scripts/stack, editable)" \
    "$AIRFLOW_ENV/bin/pip" install -q --no-deps --no-build-isolation -e "$ROOT/scripts/stack"
  step "airflow env: checking the imports" "$AIRFLOW_ENV/bin/python" -c 'import airflow.sdk, airflow.providers.apache.spark, airflow.providers.amazon
import rossmann_jobs.commit_protocol, rossmann_jobs.job_protocol'
  echo "$stamp" > "$AIRFLOW_ENV/.stamp"
  say "airflow env ready"
}

check_prerequisites
if [ "${1:-}" = "--check" ]; then echo "setup: prerequisites OK"; exit 0; fi   # the checks alone, in seconds
if [ "${1:-}" = "--executor-env-archive" ]; then executor_env_archive; exit 0; fi
# The airflow env (downloads and unpacking) installs while the jobs env compiles horovod on every core; its
# output is shown after the jobs env's, so the two do not interleave.
AIRFLOW_SETUP_LOG=$(mktemp)
trap 'rm -f "$AIRFLOW_SETUP_LOG"' EXIT
setup_airflow_env >"$AIRFLOW_SETUP_LOG" 2>&1 &
airflow_setup=$!
setup_jobs_env &   # in the background only so that `set -e` holds inside it (a function called before `||` ignores it)
if ! wait "$!"; then
  wait_for "$airflow_setup" "finishing the airflow env before stopping" || true
  cat "$AIRFLOW_SETUP_LOG"
  exit 1
fi
# The jobs' Spark driver JVMs start from a class archive (rossmann_jobs/jvm_class_archive.py, launch_settings.py): built
# once per Java build and Spark classpath, while the airflow env may still be installing.
step "jobs env: class archive for Spark's driver JVMs (about a minute; once per Java and Spark)" \
  "$ROOT/.venvs/jobs/bin/python" -m rossmann_jobs.jvm_class_archive --if-stale \
  "$("$ROOT/.venvs/jobs/bin/python" -c 'import sys; from rossmann_jobs.launch_settings import jobs_env_class_archive as a; print(a(sys.prefix))')"
airflow_status=0
wait_for "$airflow_setup" "setting up the airflow env (its output follows when it is done)" || airflow_status=$?
cat "$AIRFLOW_SETUP_LOG"
[ "$airflow_status" -eq 0 ] || die "the airflow env failed to install (its output is above)"
