#!/usr/bin/env bash
# One-command demo of the rossmann_forecast DAG on the embedded stack (moto S3 + Airflow on SQLite, loopback only):
# starts S3, lands a generated day's drop, runs the whole DAG for one date with `airflow dags test` (real
# spark-submit, 2 Horovod processes), prints the validation exp_rmspe, the champion decision and where the
# forecast is, copies submission.csv and the report to var/demo/<date>/, then stops the S3 server it started.
#
#   scripts/demo.sh [--full] [--date YYYY-MM-DD] [--stores N] [--epochs E] [--keep-running]
#
#   --full          full scale: 1,115 stores and the DAG's default training params (train ~5 min on 2 cores, the
#                   whole run ~10 min; forecast at the point-in-time floor, see bench/RESULTS.md)
#   (default: 30 stores, 10 epochs, batch 128, learning rate 1e-3: minutes on 2 cores)
#   --date          logical date = as-of date of the run (default 2015-07-31, the last day of train.csv)
#   --keep-running  leave the S3 server up (for scripts/airflow_ui.sh, backfills, inspecting outputs)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AIRFLOW_PY="$REPO/.venvs/airflow/bin/python"
JOBS_PY="$REPO/.venvs/jobs/bin/python"
STACK=("$AIRFLOW_PY" "$REPO/scripts/stack/stack.py")
export ROSSMANN_STATE_DIR="${ROSSMANN_STATE_DIR:-$REPO/var}"
# shellcheck source=scripts/progress.sh
. "$REPO/scripts/progress.sh"

# Small-run training settings: 30 stores give the DAG's default batch of 512 only ~20 steps an epoch, so smaller
# batches; the demo's run is its stack's first, so there is no champion to warm-start from anyway.
DATE=2015-07-31 STORES=30 EPOCHS=10 BATCH_SIZE=128 LEARNING_RATE=0.001 SAMPLE_RATE=1.0 SEED=7 KEEP_RUNNING=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --full) STORES=1115; EPOCHS=""; BATCH_SIZE=""; LEARNING_RATE="" ;;
    --date) DATE="$2"; shift ;;
    --stores) STORES="$2"; shift ;;
    --epochs) EPOCHS="$2"; shift ;;
    --keep-running) KEEP_RUNNING=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

demo_start=$SECONDS
if [[ ! -x "$REPO/.venvs/airflow/bin/airflow" || ! -x "$REPO/.venvs/jobs/bin/spark-submit" ]]; then
  echo "== installing the two environments (scripts/setup_env.sh: about 9 min on 2 cores the first time)"
  bash "$REPO/scripts/setup_env.sh"
  echo "== environments ready in $((SECONDS - demo_start)) s"
fi

started_s3=0
if ! "${STACK[@]}" status | grep -q '^moto .*running'; then started_s3=1; fi
cleanup() {
  if [[ $started_s3 == 1 && $KEEP_RUNNING == 0 ]]; then "${STACK[@]}" s3-stop >/dev/null; fi
}
trap cleanup EXIT

land_drop() {
  eval "$("${STACK[@]}" env --with-aws)"
  "$JOBS_PY" -m rossmann_jobs.synth land --out "s3://$ROSSMANN_BUCKET/raw" --from-date "$DATE" --to-date "$DATE" \
    --stores "$STORES" --seed "$SEED"
}

start=$(date +%s)
step "S3 server (moto) on loopback" "${STACK[@]}" s3-start
eval "$("${STACK[@]}" env)"
step "Airflow metadata DB (SQLite) in $AIRFLOW_HOME" "${STACK[@]}" airflow-init
step "landing generated raw data for $DATE ($STORES stores) at s3://$ROSSMANN_BUCKET/raw/$DATE/" land_drop

conf="{\"sample_rate\": $SAMPLE_RATE${EPOCHS:+, \"epochs\": $EPOCHS}${BATCH_SIZE:+, \"batch_size\": $BATCH_SIZE}"
conf+="${LEARNING_RATE:+, \"learning_rate\": $LEARNING_RATE}}"
mkdir -p "$ROSSMANN_STATE_DIR/log"
log="$ROSSMANN_STATE_DIR/log/demo-$DATE.log"
echo "== airflow dags test rossmann_forecast $DATE, conf $conf (full log: $log; ~2-3 min on 2 cores)"
dag_start=$SECONDS
set +e
airflow dags test rossmann_forecast "$DATE" -c "$conf" 2>&1 | tee "$log" \
  | grep --line-buffered -E '\[DAG TEST\] (starting|end) task|quality gate:|epoch [0-9]+/[0-9]+:|validation exp-RMSPE' \
  | sed -u -E 's/^([0-9T:.-]+)Z? *\[[a-z ]+\] */\1  /; s/ +\[[a-zA-Z0-9_.]+\] +loc=.*$//' \
  | with_heartbeat "running the DAG"
set -e
echo "== DAG run done in $((SECONDS - dag_start)) s"

echo
"$AIRFLOW_PY" "$REPO/scripts/stack/run_summary.py" --logical-date "$DATE"
# The steps after the run are steps too: on a loaded machine the summary and the two copies took 34 s in silence.
summary_file="$ROSSMANN_STATE_DIR/log/demo-$DATE.summary.json"
write_summary() { "$AIRFLOW_PY" "$REPO/scripts/stack/run_summary.py" --logical-date "$DATE" --json >"$summary_file"; }
STEP_QUIET=1 step "the run's outcome as JSON ($summary_file)" write_summary
summary_json="$(cat "$summary_file")"
published="$(echo "$summary_json" | "$AIRFLOW_PY" -c \
  'import json,sys; s=json.load(sys.stdin); print("success" in s["state"] and "publish_forecast" in s["xcom"])')"
if [[ "$published" != True ]]; then
  echo "The run did not publish a forecast; see $log" >&2
  exit 1
fi
local_dir="$ROSSMANN_STATE_DIR/demo/$DATE"
rm -rf "$local_dir"
read -r submission report < <(echo "$summary_json" | "$AIRFLOW_PY" -c \
  'import json,sys; f=json.load(sys.stdin)["xcom"]["publish_forecast"]; print(f["submission_uri"], f["report_uri"])')
copy_local() {
  "${STACK[@]}" fetch "$submission" "$local_dir"
  "${STACK[@]}" fetch "${report%/index.html}" "$local_dir/report"
}
STEP_QUIET=1 step "copying submission.csv and the report from S3 to $local_dir" copy_local
echo "local copies:   $local_dir/submission.csv  and  $local_dir/report/index.html"
# The whole wait a newcomer sat through: the set-up (when this command ran it) and the run after it.
run_s=$(( $(date +%s) - start ))
echo "demo wall time: $((SECONDS - demo_start)) s in all (set-up $((SECONDS - demo_start - run_s)) s, the stack and the DAG run ${run_s} s)"
