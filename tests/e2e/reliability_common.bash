# Shared by the reliability_*.sh tests: a tiny 2-rank recipe, direct mpirun launches (so that
# one rank can be started through a wrapper: a file size limit, an address space limit, a
# stop before MPI_Init) and a timer. Sourced after common.bash.
cd "$WORK"
for i in $(seq 100); do printf 'reliability %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
cat > r.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 32, heads: 4, seq_len: 32, ffn: 64}
data: {train: [{path: text.txt}]}
train: {steps: 4, micro_batch: 2, global_batch: 4, warmup: 0}
logging: {every: 1}
launch: {timeout_s: 60}
YAML
# The timeouts above are long on purpose: each case must end in seconds because the error
# travels, not because a collective timed out.

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# mpirun_ranks WRAPPER_SETUP_FOR_RANK_1 ARGS...: `llmrun ARGS` on 2 ranks under mpirun; rank 1
# first runs the shell snippet (ulimit, kill -STOP $$, ...). Sets RC and ELAPSED; output in
# out.log / err.log. A job still running after 60 s is killed and fails the test.
mpirun_ranks() {
  local setup=$1; shift
  cat > rank_wrapper.sh <<WRAP
#!/bin/bash
if [ "\$OMPI_COMM_WORLD_RANK" = 1 ]; then $setup
fi
exec "$LLMRUN" "\$@"
WRAP
  chmod +x rank_wrapper.sh
  timed mpirun -np 2 --oversubscribe ./rank_wrapper.sh "$@"
}

# timed CMD...: runs CMD in the background with a 60 s limit; sets RC and ELAPSED (seconds).
timed() {
  local t0=$SECONDS
  "$@" >out.log 2>err.log &
  local job=$!
  for _ in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  if kill -0 $job 2>/dev/null; then
    pkill -9 -P $job || true; kill -9 $job || true
    cat err.log >&2
    fail "'$*' still running after 60 s"
  fi
  RC=0
  wait $job || RC=$?
  ELAPSED=$((SECONDS - t0))
}

# expect_job RC_WANT PATTERN MAX_SECONDS WHAT: checks the last timed job. MAX_SECONDS is what an
# idle machine needs; a loaded one (ctest -j, one core) gets up to 45 s, still short of the
# 60 s launch.timeout_s that a job ended by a collective's timeout would take.
expect_job() {
  local max=$(($3 > 45 ? $3 : 45))
  [ "$RC" = "$1" ] || { cat err.log >&2; fail "$4: exited $RC, expected $1"; }
  grep -qE -- "$2" err.log || { cat err.log >&2; fail "$4: stderr lacks /$2/"; }
  [ "$ELAPSED" -le "$max" ] || { cat err.log >&2; fail "$4: took ${ELAPSED}s, more than $max s"; }
  echo "$4: exit $RC in ${ELAPSED}s: $(grep -m1 -E -- "$2" err.log)"
}

# No rank may outlive its job: no llmrun, mpirun or rank wrapper process still working in $WORK.
# A rank that is exiting takes a moment to go (more on a loaded machine): polled for up to 10 s,
# not read once after a fixed sleep.
no_ranks_left() {
  local left d
  for _ in $(seq 50); do
    left=""
    for d in /proc/[0-9]*; do
      [ "$(readlink "$d/cwd" 2>/dev/null)" = "$WORK" ] || continue
      case "$(readlink "$d/exe" 2>/dev/null) $(tr '\0' ' ' <"$d/cmdline" 2>/dev/null)" in
        *reliability_*) ;;  # this test's own shell and its subshells
        *llmrun*|*orterun*|*mpirun*|*rank_wrapper*) left="$left ${d#/proc/}" ;;
      esac
    done
    [ -z "$left" ] && break
    sleep 0.2
  done
  if [ -n "$left" ]; then
    ps -o pid,ppid,stat,args -p "${left# }" >&2 || true
    kill -9 $left 2>/dev/null || true
    fail "$1: processes left running:$left"
  fi
}
