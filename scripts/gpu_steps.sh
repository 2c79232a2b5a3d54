# Sourced by the scripts/gpu_session*.sh of a lent-GPU call (bash): `step LIMIT_S FILE CMD...`
# runs CMD with its output appended to $out/FILE, in a process group of its own, killed whole
# (SIGTERM, SIGKILL $STEP_GRACE_S, default 5, s later) at LIMIT_S or at the call's deadline, whichever comes first: a
# `timeout CMD | tee` step can outlive its limit when CMD survives SIGTERM (a job's graceful
# stop) or a child keeps the pipe open (RESULTS 18, call 1). No step starts within 10 s of the
# deadline. `call_start DEFAULT_DEADLINE_S` begins a call: $out (=$OUT), a private HOME, runtime
# folder and compile cache, the clock (start, deadline: $DEADLINE_S or the default) and machine.txt.

call_start() {  # default deadline in seconds
  out=${OUT:-gpu-out}; mkdir -p "$out"
  export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc
  # One private runtime folder for every process of the call, so jobs and tests (whose conftest
  # moves XDG_CACHE_HOME, not this) take the same GPU lock (evaluator.gpu_lock.lock_dir).
  export XDG_RUNTIME_DIR=/tmp/krun
  mkdir -p "$HOME"
  mkdir -p -m 700 "$XDG_RUNTIME_DIR"
  start=$SECONDS; deadline=${DEADLINE_S:-$1}
  { date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } \
    >"$out/machine.txt"
}

step() {  # limit_s, output file, command...: bounded by its limit and by the deadline
  local limit=$1 name=$2 log=$out/$2; shift 2
  # SIGTERM at the limit, SIGKILL $STEP_GRACE_S (default 5) later; a step given a longer grace
  # (a job that stops after its iteration in flight) is sent SIGTERM that much earlier, so its
  # SIGKILL still comes by the deadline.
  local grace=${STEP_GRACE_S:-5}
  local left=$(( deadline - (SECONDS - start) - grace + 5 ))
  (( left < limit )) && limit=$left
  if (( limit < 10 )); then echo "[skipped: past the deadline]" >>"$log"; return; fi
  echo "\$ $*" >>"$log"
  setsid "$@" >>"$log" 2>&1 &
  local pid=$!
  # The watchdog is a process group of its own, off stdout: killed whole, no sleep outlives it
  # holding the call's output open.
  setsid bash -c 'sleep "$1"; kill -TERM -- "-$2"; sleep "$3"; kill -KILL -- "-$2"' _ "$limit" \
    "$pid" "$grace" >/dev/null 2>&1 &
  local watchdog=$!
  wait "$pid"; local rc=$?
  kill -- "-$watchdog" 2>/dev/null
  echo "[exit $rc, limit ${limit}s, at $(( SECONDS - start ))s]" >>"$log"
  echo "$name: exit $rc at $(( SECONDS - start ))s"
}
