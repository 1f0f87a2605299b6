# Progress for long shell steps (sourced by setup_env.sh, setup_system.sh, test.sh and demo.sh): each step says what
# it does and how long it took, and prints a line at least every PROGRESS_EVERY seconds, so a newcomer can tell
# progress from a hang. 20 s keeps the promise of "a line at least every 30 s" on a loaded machine: bash's SECONDS
# counts whole seconds, the poll sleeps 0.2 s, and a busy 2-core machine delays both.
PROGRESS_EVERY="${PROGRESS_EVERY:-20}"

# step WHAT CMD...: runs CMD (a command or a shell function) with its output in a log file, prints "still WHAT: N s"
# every PROGRESS_EVERY s while it runs, then its duration and its output (pip -q and friends print little; with
# STEP_QUIET=1 the output is shown only on failure). On failure the output comes with the log's path, and the status
# is CMD's.
step() {
  local what=$1; shift
  local log start=$SECONDS status=0
  log=$(mktemp "${TMPDIR:-/tmp}/rossmann-step.XXXXXX")
  printf '== %s\n' "$what"
  "$@" >"$log" 2>&1 &
  wait_for "$!" "$what" "$start" || status=$?
  if [ "$status" -eq 0 ]; then
    [ "${STEP_QUIET:-0}" = 1 ] || cat "$log"
    printf '   done in %d s: %s\n' $((SECONDS - start)) "$what"
    rm -f "$log"
  else
    printf '%s failed after %d s (exit status %d); its output (kept in %s):\n' \
      "$what" $((SECONDS - start)) "$status" "$log" >&2
    tail -n 100 "$log" >&2
  fi
  return "$status"
}

# wait_for PID WHAT [START]: waits for a background job, printing "still WHAT: N s" every PROGRESS_EVERY s; its status.
wait_for() {
  local pid=$1 what=$2 start=${3:-$SECONDS}
  local next=$((start + PROGRESS_EVERY))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.2
    if [ "$SECONDS" -ge "$next" ]; then
      printf '   still %s: %d s\n' "$what" $((SECONDS - start))
      next=$((next + PROGRESS_EVERY))
    fi
  done
  wait "$pid"
}

# ... | with_heartbeat WHAT: copies lines through; after PROGRESS_EVERY s without one, prints "still WHAT: N s".
with_heartbeat() {
  local what=$1 start=$SECONDS line rc
  while true; do
    rc=0
    IFS= read -r -t "$PROGRESS_EVERY" line || rc=$?
    if [ "$rc" -eq 0 ]; then
      printf '%s\n' "$line"
    elif [ "$rc" -gt 128 ]; then   # read timed out: nothing new for PROGRESS_EVERY s
      [ -n "$line" ] && printf '%s\n' "$line"   # what came of a line so far (read consumed it)
      printf '   still %s: %d s\n' "$what" $((SECONDS - start))
    else
      [ -n "$line" ] && printf '%s\n' "$line"   # a last line without a newline
      return 0
    fi
  done
}
