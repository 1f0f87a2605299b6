#!/usr/bin/env bash
# The README's test command: set everything up, lint (ruff), then run the job-side and the Airflow-side test suites.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/progress.sh
. scripts/progress.sh
started=$SECONDS

# Fail in the first seconds on what would otherwise fail an hour in. The full suite's compose test starts its own
# Docker engine (scripts/compose_e2e.sh): that needs root, unless an engine already answers.
bash scripts/setup_env.sh --check
if [ $# -eq 0 ] && [ "$(id -u)" -ne 0 ] && ! docker info >/dev/null 2>&1; then
  echo "test: the full suite starts its own Docker engine for the compose test, which needs root: run it as root" \
       "(sudo bash scripts/test.sh), or start dockerd so that \`docker info\` answers, or leave the compose test out:" \
       "bash scripts/test.sh --ignore=tests/dag/test_compose_e2e.py" >&2
  exit 1
fi
free=$(df -Pk "$ROOT" | awk 'NR == 2 { print int($4 / 1048576) }')
if [ "$free" -lt 20 ]; then   # a warning only: with the images and envs already built, much less is enough
  echo "test: warning: $free GiB free; a first run needs about 20 GiB (the two envs ~3.5 GiB, the compose images ~8 GiB)" >&2
fi

# Debian packages download and install while setup_env.sh builds; each one's output stays in one piece.
SYSTEM_SETUP_LOG=$(mktemp)
trap 'rm -f "$SYSTEM_SETUP_LOG"' EXIT
bash scripts/setup_system.sh >"$SYSTEM_SETUP_LOG" 2>&1 &
system_setup=$!
bash scripts/setup_env.sh || { wait "$system_setup" || true; cat "$SYSTEM_SETUP_LOG"; exit 1; }
system_status=0
wait_for "$system_setup" "installing Debian packages (scripts/setup_system.sh; its output follows)" || system_status=$?
cat "$SYSTEM_SETUP_LOG"
[ "$system_status" -eq 0 ] || { echo "setup_system.sh failed (its output is above)" >&2; exit 1; }

export PATH="$ROOT/.venvs/jobs/bin:$PATH"   # spark-submit and the jobs' python for subprocesses
status=0
echo "== set-up done in $((SECONDS - started)) s"
echo "== lint: ruff ([tool.ruff] in pyproject.toml)"
.venvs/jobs/bin/ruff check . || status=$?
# The whole suite's compose end-to-end run (scripts/compose_e2e.sh: image builds, the stack, a DAG run with a worker
# killed) runs beside the job side: each side leaves about a quarter of the 2 cores idle (JVM and stack start-ups,
# waits), and the run needs nothing the job side makes. tests/dag/test_compose_e2e.py checks its evidence
# (ROSSMANN_COMPOSE_E2E_DIR); with pytest arguments it runs the script itself, if selected. The Airflow side starts
# once the run has ended, so that no two stacks overlap. 75 min: the test's own limit for the script.
compose_run=""
if [ $# -eq 0 ]; then
  ROSSMANN_COMPOSE_E2E_DIR=$(mktemp -d)
  export ROSSMANN_COMPOSE_E2E_DIR
  trap 'rm -f "$SYSTEM_SETUP_LOG"; rm -rf "$ROSSMANN_COMPOSE_E2E_DIR"' EXIT
  ( set +e
    timeout -k 60 4500 bash scripts/compose_e2e.sh --evidence "$ROSSMANN_COMPOSE_E2E_DIR/evidence.json" \
      --kill-worker-during-train >"$ROSSMANN_COMPOSE_E2E_DIR/output.log" 2>&1
    echo $? >"$ROSSMANN_COMPOSE_E2E_DIR/exit_code" ) &
  compose_run=$!
  echo "== compose end-to-end run: started beside the job side (scripts/compose_e2e.sh)"
fi
# Each side reports its tests as they run; --durations says where the time went.
part=$SECONDS
echo "== tests: job side (.venvs/jobs)"
.venvs/jobs/bin/python -m pytest tests/jobs -p no:cacheprovider --durations=15 "$@" || status=$?
echo "== job side done in $((SECONDS - part)) s"
if [ -n "$compose_run" ]; then
  part=$SECONDS
  wait_for "$compose_run" "the compose end-to-end run" || true
  echo "== compose end-to-end run: ended (exit $(cat "$ROSSMANN_COMPOSE_E2E_DIR/exit_code" 2>/dev/null || echo none)," \
       "$((SECONDS - part)) s after the job side); tests/dag/test_compose_e2e.py checks it"
fi
part=$SECONDS
echo "== tests: Airflow side (.venvs/airflow)"
.venvs/airflow/bin/python -m pytest tests/dag -p no:cacheprovider --durations=15 "$@" || status=$?
echo "== Airflow side done in $((SECONDS - part)) s; the whole test command took $((SECONDS - started)) s (exit status $status)"
exit $status
