#!/usr/bin/env bash
# Entry point of the Spark image (master, workers, one-off job commands): the Spark secret into a file only this
# user reads (docker/spark-auth-conf.sh), then the command.
set -euo pipefail
source "$(dirname "$0")/../spark-auth-conf.sh"   # the images keep docker/'s layout under /opt/rossmann
write_spark_auth_conf
exec "$@"
