#!/usr/bin/env bash
# Entry point of the Airflow image: `airflow <args>`, or `init` (database migration and the DAG's Spark pool).
# When AIRFLOW_ADMIN_PASSWORD is set (the api-server only), it first writes SimpleAuthManager's password file for
# the user `admin` from it, readable by this user only, so no password is baked into the image or generated at
# random inside a container. Where SPARK_AUTH_SECRET is set (the scheduler, which runs the Spark drivers), it
# writes the drivers' spark-defaults.conf from it and drops it from the environment (docker/spark-auth-conf.sh).
set -euo pipefail
source "$(dirname "$0")/../spark-auth-conf.sh"   # the images keep docker/'s layout under /opt/rossmann
write_spark_auth_conf

if [[ -n "${AIRFLOW_ADMIN_PASSWORD:-}" ]]; then
  default_file="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
  passwords_file="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:-$default_file}"
  (umask 077 && python3 -c '
import json, os, sys
with open(sys.argv[1], "w") as handle:
    json.dump({"admin": os.environ["AIRFLOW_ADMIN_PASSWORD"]}, handle)' "$passwords_file")
fi
if [[ "${1:-}" == "init" ]]; then   # the one-shot airflow-init service: database, then the DAG's Spark pool
  airflow db migrate
  exec "$(dirname "$(command -v airflow)")/python" -m rossmann.pools   # the installed rossmann-forecast wheel
fi
exec airflow "$@"
