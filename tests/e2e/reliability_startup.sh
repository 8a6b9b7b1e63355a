# Startup never hangs and ranks die with their launcher: a rank that never reaches MPI_Init
# (stopped before it) makes the others exit after launch.timeout_s with a message naming the
# phase; kill -9 of the `llmrun --nproc` process ends mpirun and every rank within seconds.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/reliability_common.bash"

# Rank 1 stops itself before it starts llmrun: rank 0 waits in MPI_Init for a peer that never comes.
mpirun_ranks "kill -STOP \$\$" train r.yaml --set launch.timeout_s=3
expect_job 1 "rank 0: startup \(MPI_Init\) did not complete within launch.timeout_s=3 s" 20 "rank stopped before MPI_Init"
no_ranks_left "rank stopped before MPI_Init"

# Rank 1 is stopped a moment after it starts (inside MPI_Init or in the group splits; on a fast
# machine already in training, which is endless here so that the job cannot finish first).
mpirun_ranks "(sleep 0.3; kill -STOP \$\$) &" train r.yaml --set launch.timeout_s=3 --set train.steps=1000000
[ "$RC" != 0 ] || fail "rank stopped during startup: job exited 0"
grep -qE "rank 0: (startup \(MPI_(Init|Comm_split)[^)]*\) did not complete|.* did not complete within launch.timeout_s=3)" err.log ||
  { cat err.log; fail "rank stopped during startup: no message naming the phase"; }
[ "$ELAPSED" -le 45 ] || fail "rank stopped during startup: took ${ELAPSED}s"  # as expect_job
echo "rank stopped during startup: exit $RC in ${ELAPSED}s: $(grep -m1 'did not complete' err.log)"
no_ranks_left "rank stopped during startup"

# kill -9 of the llmrun --nproc parent while training: mpirun and both ranks go too.
"$LLMRUN" train r.yaml --nproc 2 --set train.steps=1000000 --set logging.metrics=m.jsonl >out.log 2>err.log &
parent=$!
for _ in $(seq 600); do  # up to 60 s: a loaded machine starts 2 ranks slowly
  [ -s m.jsonl ] && [ "$(wc -l <m.jsonl)" -ge 2 ] && break
  kill -0 $parent 2>/dev/null || { cat err.log; fail "training exited early"; }
  sleep 0.1
done
[ -s m.jsonl ] || { cat err.log; kill -9 $parent; fail "training did not start"; }
mpirun=$(pgrep -P $parent | head -n 1)
ranks=$(pgrep -P "$mpirun" | tr '\n' ' ')
[ -n "$ranks" ] || fail "no ranks under mpirun"
t0=$SECONDS
kill -9 $parent
wait $parent 2>/dev/null || true
for _ in $(seq 300); do  # 30 s: on a loaded machine exiting ranks take a while
  alive=""
  for p in $mpirun $ranks; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
  [ -z "$alive" ] && break
  sleep 0.1
done
if [ -n "$alive" ]; then
  ps -o pid,ppid,stat,args -p "${alive# }" >&2 || true
  kill -9 $alive 2>/dev/null
  fail "kill -9 of the parent left processes running after 30 s:$alive"
fi
echo "parent killed: mpirun and ranks ($ranks) gone in $((SECONDS - t0))s"

# kill -9 of mpirun itself (the parent stays): the ranks notice their parent is gone and exit,
# and the parent exits with mpirun's status.
"$LLMRUN" train r.yaml --nproc 2 --set train.steps=1000000 --set logging.metrics=m2.jsonl >out.log 2>err.log &
parent=$!
for _ in $(seq 600); do
  [ -s m2.jsonl ] && [ "$(wc -l <m2.jsonl)" -ge 2 ] && break
  kill -0 $parent 2>/dev/null || { cat err.log; fail "training exited early"; }
  sleep 0.1
done
[ -s m2.jsonl ] || { cat err.log; kill -9 $parent; fail "training did not start"; }
mpirun=$(pgrep -P $parent | head -n 1)
ranks=$(pgrep -P "$mpirun" | tr '\n' ' ')
t0=$SECONDS
kill -9 "$mpirun"
RC=0
for _ in $(seq 300); do kill -0 $parent 2>/dev/null || break; sleep 0.1; done
kill -0 $parent 2>/dev/null && { kill -9 $parent; fail "mpirun killed: the llmrun parent did not exit"; }
wait $parent || RC=$?
[ "$RC" = 137 ] || fail "mpirun killed: parent exited $RC, expected 137 (mpirun's SIGKILL)"
for _ in $(seq 300); do  # 30 s: on a loaded machine exiting ranks take a while
  alive=""
  for p in $ranks; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
  [ -z "$alive" ] && break
  sleep 0.1
done
[ -z "$alive" ] || { kill -9 $alive; fail "mpirun killed: ranks left running:$alive"; }
# (The ranks' own message went to mpirun's output pipe, which died with it.)
echo "mpirun killed: ranks ($ranks) gone in $((SECONDS - t0))s"
no_ranks_left "mpirun killed"
echo "startup: ok"
