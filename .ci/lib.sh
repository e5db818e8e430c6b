# Helpers of .ci/run, .ci/server and .ci/browser (sourced, not run).

# log MESSAGE: a step's heading, with the seconds since the script started.
log() { printf '\n== %s   [%d s]\n' "$*" "$SECONDS"; }

# ping_redis HOST PORT: true when a Redis answers PONG there.
ping_redis() {
  local reply
  # Grouped, so that 2>/dev/null ends with the exec: on its own it would keep the rest of
  # the script's stderr going to /dev/null.
  { exec 3<>"/dev/tcp/$1/$2"; } 2>/dev/null || return 1
  printf 'PING\r\n' >&3
  IFS= read -r -t 3 reply <&3 || true
  exec 3>&- 3<&-
  [[ "$reply" == +PONG* ]]
}

# listening PORT: true when something accepts connections on 127.0.0.1:PORT.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Steps that run side by side. `step NAME COMMAND...` starts COMMAND (a function or a program)
# in the background, under `set -e`, with its output in a log of its own; `wait_steps` waits
# for steps, prints each one's log and time as it ends, and fails when any failed.
# `step_done NAME` is true once NAME has ended, and `step_ok NAME` once it has passed.
step_logs=$(mktemp -d)
declare -A step_pid=() step_start=()
step_order=()
step() {
  local name=$1
  shift
  step_start[$name]=$SECONDS
  (
    set +e
    (set -e; "$@") >"$step_logs/$name.log" 2>&1
    echo "$? $SECONDS" >"$step_logs/$name.rc" # the status, and the time it ended
  ) &
  step_pid[$name]=$!
  step_order+=("$name")
  printf '   started: %s   [%d s]\n' "$name" "$SECONDS"
}
step_done() { [ -f "$step_logs/$1.rc" ]; }
step_ok() { step_done "$1" && [ "$(cut -d' ' -f1 "$step_logs/$1.rc")" = 0 ]; }
# wait_for_step NAME: waits until NAME has ended; fails unless it passed.
wait_for_step() {
  until step_done "$1"; do sleep 1; done
  step_ok "$1" || { echo "step $1 failed" >&2; return 1; }
}
declare -A step_time=()
# wait_steps [NAME...]: waits for the steps named, or for all.
wait_steps() {
  local failed=() name pid left names=("$@")
  [ ${#names[@]} -gt 0 ] || names=("${step_order[@]}")
  while :; do
    left=0
    for name in "${names[@]}"; do
      [ -n "${step_time[$name]:-}" ] && continue
      left=1
      step_done "$name" || continue
      pid=${step_pid[$name]}
      wait "$pid" 2>/dev/null || true
      step_time[$name]=$(($(cut -d' ' -f2 "$step_logs/$name.rc") - step_start[$name]))
      if step_ok "$name"; then
        log "$name: passed in ${step_time[$name]} s (from ${step_start[$name]} s)"
      else
        log "$name: FAILED in ${step_time[$name]} s (from ${step_start[$name]} s)"
        failed+=("$name")
      fi
      cat "$step_logs/$name.log"
    done
    [ $left = 0 ] && break
    sleep 1
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo >&2
    echo "**********************************************************************" >&2
    echo "FAILED: ${failed[*]} (their logs are above)" >&2
    echo "**********************************************************************" >&2
    return 1
  fi
}
# step_times: every step's start and time, in the order they started.
step_times() {
  local name
  printf '%-28s %8s %8s\n' step "start s" "time s"
  for name in "${step_order[@]}"; do
    printf '%-28s %8s %8s\n' "$name" "${step_start[$name]}" "${step_time[$name]:-?}"
  done
}
