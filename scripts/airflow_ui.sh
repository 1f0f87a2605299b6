#!/usr/bin/env bash
# The real Airflow UI on the embedded stack: moto S3 plus api-server, scheduler, dag-processor and triggerer,
# all on 127.0.0.1, each in its own process group with its pid in var/run/ and its log in var/log/.
#
#   scripts/airflow_ui.sh [--port 8080]   start (prints the URL and the admin login)
#   scripts/airflow_ui.sh --stop          stop the Airflow components and the S3 server
#   scripts/airflow_ui.sh --status
#
# Then land data and trigger from the browser (Trigger, with the params form), or backfill:
#   eval "$(.venvs/airflow/bin/python scripts/stack/stack.py env --with-aws)"
#   .venvs/jobs/bin/python -m rossmann_jobs.synth land --out s3://rossmann/raw --from-date D1 --to-date D2 --stores 30
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
    echo "The DAG starts paused: unpause it in the UI (or trigger it, which asks to unpause)."
    echo "Stop everything with: scripts/airflow_ui.sh --stop"
    ;;
  -h|--help) sed -n '2,13p' "$0" ;;
  *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
esac
