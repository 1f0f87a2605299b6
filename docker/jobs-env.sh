#!/usr/bin/env bash
# Builds the pinned jobs environment (what the Spark driver and every executor run) into a venv, in an image build
# stage: the same pins and steps as scripts/setup_env.sh, then the same checks.
#
#   jobs-env.sh SRC VENV     SRC holds requirements-jobs.txt, constraints/jobs.txt and wheels/ (prebuilt horovod
#                            wheels, maybe none: docker/wheels/README.md); needs g++ and make to compile horovod
#
# Both docker/spark/Dockerfile and docker/airflow/Dockerfile run it in an identical first stage, so a build of
# the whole stack compiles horovod once (the second image reuses the cached stage).
set -euo pipefail

SRC="$1"
VENV="$2"
HOROVOD_VERSION=0.28.1
HOROVOD_EXTRAS=tensorflow-cpu   # not [spark]: see requirements-jobs.txt
SAGEMAKER_PYSPARK=1.4.5   # its sdist ships hadoop-aws-3.3.1.jar + aws-java-sdk-bundle-1.11.901.jar (PyPI only)
S3A_JARS=(hadoop-aws-3.3.1.jar aws-java-sdk-bundle-1.11.901.jar)
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off TF_CPP_MIN_LOG_LEVEL=2

say() { printf '== jobs-env: %s\n' "$*"; }

python3.11 -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade "pip>=24" wheel "setuptools>=78.1.1"

say "requirements-jobs.txt with constraints/jobs.txt"
"$PIP" install -q -r "$SRC/requirements-jobs.txt" -c "$SRC/constraints/jobs.txt"

prebuilt=$(ls "$SRC"/wheels/horovod-"$HOROVOD_VERSION"-cp311-cp311-linux_x86_64.whl 2>/dev/null || true)
if [ -n "$prebuilt" ]; then
  say "horovod $HOROVOD_VERSION from the prebuilt wheel $(basename "$prebuilt")"
  "$PIP" install -q "$prebuilt[$HOROVOD_EXTRAS]" -c "$SRC/constraints/jobs.txt"
else
  say "horovod $HOROVOD_VERSION with TensorFlow + Gloo (compiles for several minutes)"
  # cmake 4 dropped compatibility with gloo's cmake_minimum_required; constraints/jobs.txt pins cmake 3.x.
  "$PIP" install -q cmake packaging -c "$SRC/constraints/jobs.txt"
  env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
      HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" PATH="$VENV/bin:$PATH" \
      "$PIP" install -q --no-build-isolation "horovod[$HOROVOD_EXTRAS]==$HOROVOD_VERSION" \
      -c "$SRC/constraints/jobs.txt"
  "$PIP" uninstall -q -y cmake   # build tool only
fi

say "S3A jars from the sagemaker-pyspark $SAGEMAKER_PYSPARK sdist into pyspark's jars/"
pyspark_jars="$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/jars"
tmp="$(mktemp -d)"
"$PIP" download -q --no-deps --no-binary :all: "sagemaker-pyspark==$SAGEMAKER_PYSPARK" -d "$tmp"
for jar in "${S3A_JARS[@]}"; do
  tar -xzf "$tmp"/sagemaker_pyspark-*.tar.gz -C "$tmp" --wildcards "*/deps/jars/$jar"
  cp "$tmp"/sagemaker_pyspark-*/deps/jars/"$jar" "$pyspark_jars/"
done
rm -rf "$tmp"

say "checks"
"$VENV/bin/python" -c '
import numpy, tensorflow, pyspark
assert numpy.__version__.startswith("1."), numpy.__version__
assert pyspark.__version__.startswith("3.5"), pyspark.__version__'
build="$("$VENV/bin/horovodrun" --check-build)"
grep -q '\[X\] TensorFlow' <<<"$build" || { echo "horovod was built without TensorFlow: $build" >&2; exit 1; }
grep -q '\[X\] Gloo' <<<"$build" || { echo "horovod was built without Gloo: $build" >&2; exit 1; }
"$PIP" check
say "ready: $VENV"
