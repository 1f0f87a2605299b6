#!/usr/bin/env bash
# The real Airflow UI on the embedded stack: moto S3 plus api-server, scheduler, dag-processor and triggerer,
# all on 127.0.0.1, each in its own process group with its pid in var/run/ and its log in var/log/.
#
#   scripts/airflow_ui.sh [--port 8080]   start (prints the URL and the admin login)
#   scripts/airflow_ui.sh --stop          stop the Airflow components and the S3 server
#   scripts/airflow_ui.sh --status
#
# Then land data and trigger from the browser (Trigger, with the params form), or backfill:
#   eval "$(.venvs/airflow/bin/rossmann-stack env --with-aws)"
#   .venvs/jobs/bin/rossmann-synth land --out s3://rossmann/raw --from-date D1 --to-date D2 --stores 30
#   airflow backfill create --dag-id rossmann_forecast --from-date D1 --to-date D2 --max-active-runs 1
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STACK=("$REPO/.venvs/airflow/bin/python" "$REPO/scripts/stack/stack.py")
export ROSSMANN_STATE_DIR="${ROSSMANN_STATE_DIR:-$REPO/var}"

case "${1:-}" in
  --stop)
    "${STACK[@]}" ui-stop
    "${STACK[@]}" s3-stop
    ;;
  --status)
    "${STACK[@]}" status
    ;;
  ""|--port)
    "${STACK[@]}" s3-start
    "${STACK[@]}" ui-start ${2:+--port "$2"}
    # A first unpause creates the scheduled run for yesterday, whose drop the generator cannot make (its data end
    # on 2015-07-31): say what that run will wait for, and how to get a run that finishes instead.
    yesterday=$("$REPO/.venvs/airflow/bin/python" -c \
      'import datetime as d; print(d.datetime.now(d.timezone.utc).date() - d.timedelta(days=1))')
    echo "The DAG starts paused. Unpausing it creates the scheduled run for $yesterday, which waits up to 6 h"
    echo "(param raw_drop_timeout_s) for s3://${ROSSMANN_BUCKET:-rossmann}/raw/$yesterday/_SUCCESS and then fails; generated drops"
    echo "exist only for 2013-01-01 to 2015-07-31. For a run that finishes, land a drop and trigger that date"
    echo "(Trigger in the UI, logical date 2015-07-31, or the last command):"
    echo "  eval \"\$(.venvs/airflow/bin/rossmann-stack env --with-aws)\""
    echo "  .venvs/jobs/bin/rossmann-synth land --out s3://${ROSSMANN_BUCKET:-rossmann}/raw --from-date 2015-07-31 --to-date 2015-07-31 --stores 30"
    echo "  .venvs/airflow/bin/airflow dags trigger rossmann_forecast --logical-date 2015-07-31 --conf '{\"epochs\": 10, \"batch_size\": 128}'"
    echo "Stop everything with: scripts/airflow_ui.sh --stop"
    ;;
  -h|--help) sed -n '2,13p' "$0" ;;
  *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
esac
