# A private single-node Slurm cluster for tests: munged, slurmctld and slurmd from Debian's
# packages, configured in a temp dir on free ports, so it runs beside any other Slurm.
# Configuration and pitfalls: ../shared/notes/slurm-single-node.md (PMIx only, SLURM_CONF for
# every client, cred_expire + sched_interval for a fast requeue, linuxproc loses orphans).
# cred_expire=5 (the note used 10) makes a requeued job eligible again ~6 s after it ended.
#
#   slurm_up DIR      starts the daemons (every directory above DIR must be world-executable:
#                     munged checks the path to its socket) (returns 1 with a reason in SLURM_UP_ERROR on failure)
#   slurm_down        stops every daemon slurm_up started, by PID, and waits until they are gone
# After slurm_up, SLURM_CONF is exported for sbatch/squeue/scontrol.

SLURM_PIDS=()
SLURM_DIR=""
SLURM_UP_ERROR=""

# A TCP port nobody listens on now (the kernel's pick for an ephemeral bind).
_free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits up to $1 tenths of a second for command "${@:2}" to succeed.
_wait_for() {
  local tenths=$1; shift
  for _ in $(seq "$tenths"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

_pid_from() { [ -s "$1" ] && cat "$1"; }

# The last lines of each given log that exists, on one line: SLURM_UP_ERROR ends up on the
# test's one-line SKIPPED reason. (`tail -3 A B` is not valid GNU tail: -N takes one file.)
_log_tail() {
  local f out=""
  for f in "$@"; do
    [ -s "$f" ] && out+="${out:+ | }${f##*/}: $(tail -n 3 "$f" | paste -sd' ' -)"
  done
  echo "${out:-(no log output)}"
}

slurm_up() {
  local d=$1 node cpus
  SLURM_DIR=$d
  # Exported first, so every daemon carries it too: slurm_leftover_processes finds them by it.
  export SLURM_CONF=$d/etc/slurm.conf
  node=$(hostname -s)
  cpus=$(nproc); [ "$cpus" -ge 2 ] || cpus=2
  mkdir -p "$d"/{munge,state,spool,log,run/munge,etc,pmix}
  chmod 700 "$d/munge"; chmod 755 "$d/run/munge" "$d/run" "$d"
  mungekey -c -k "$d/munge/munge.key" 2>"$d/log/mungekey.log" || { SLURM_UP_ERROR="mungekey failed: $(_log_tail "$d/log/mungekey.log")"; return 1; }
  munged --key-file="$d/munge/munge.key" --socket="$d/run/munge/munge.socket.2" --pid-file="$d/run/munge/munged.pid" \
    --log-file="$d/log/munged.log" --seed-file="$d/munge/munged.seed" 2>>"$d/log/munged.log" ||
    { SLURM_UP_ERROR="munged did not start: $(_log_tail "$d/log/munged.log")"; return 1; }
  _wait_for 50 _pid_from "$d/run/munge/munged.pid" || { SLURM_UP_ERROR="munged wrote no pid file"; return 1; }
  SLURM_PIDS+=("$(cat "$d/run/munge/munged.pid")")

  # Two stand-in GPUs so that the batch script's --gpus-per-node is scheduled as on a GPU
  # node. Slurm drops a GPU without a device file, so two harmless character devices play
  # them (no cgroup plugin is loaded: nothing is opened or constrained). The CPU backend
  # ignores them.
  cat > "$d/etc/gres.conf" <<GRES
NodeName=$node Name=gpu File=/dev/null
NodeName=$node Name=gpu File=/dev/zero
GRES
  # Two clusters on one machine (two test runs at once) must not share PMIx's per-job temp
  # dirs, which are named by job id: a private base dir, and job ids that differ anyway.
  echo "PMIxCliTmpDirBase=$d/pmix" > "$d/etc/mpi.conf"
  cat > "$d/etc/slurm.conf" <<CONF
ClusterName=llmrun-test
FirstJobId=$(( (RANDOM % 9000 + 1000) * 100 ))
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(_free_port)
SlurmdPort=$(_free_port)
SlurmUser=$(id -un)
AuthInfo=socket=$d/run/munge/munge.socket.2,cred_expire=5
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=pmix
SchedulerParameters=sched_interval=2,bf_interval=2
SlurmdParameters=config_overrides
MailProg=/bin/true
ReturnToService=2
KillWait=20
MinJobAge=600
NodeName=$node CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=2000 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
  slurmctld -f "$SLURM_CONF" 2>>"$d/log/slurmctld.stderr" || { SLURM_UP_ERROR="slurmctld did not start: $(_log_tail "$d/log/slurmctld.log" "$d/log/slurmctld.stderr")"; return 1; }
  _wait_for 50 _pid_from "$d/run/slurmctld.pid" || { SLURM_UP_ERROR="slurmctld wrote no pid file: $(_log_tail "$d/log/slurmctld.log" "$d/log/slurmctld.stderr")"; return 1; }
  SLURM_PIDS+=("$(cat "$d/run/slurmctld.pid")")
  slurmd -f "$SLURM_CONF" 2>>"$d/log/slurmd.stderr" || { SLURM_UP_ERROR="slurmd did not start: $(_log_tail "$d/log/slurmd.log" "$d/log/slurmd.stderr")"; return 1; }
  _wait_for 50 _pid_from "$d/run/slurmd.pid" || { SLURM_UP_ERROR="slurmd wrote no pid file: $(_log_tail "$d/log/slurmd.log" "$d/log/slurmd.stderr")"; return 1; }
  SLURM_PIDS+=("$(cat "$d/run/slurmd.pid")")
  _node_idle() { [ "$(sinfo -h -o %T)" = idle ]; }
  _wait_for 100 _node_idle || { SLURM_UP_ERROR="node never became idle: $(sinfo -h 2>&1 | tr -s '\n' ' ')| $(_log_tail "$d/log/slurmd.log")"; return 1; }
}

# True while PID runs (a zombie has finished: it waits only for its parent to reap it).
_running() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${st:0:1}" != Z ]; }

slurm_down() {
  local pid
  # slurmd first (it owns job steps), then the controller, then munge. A stopped daemon can
  # linger as a zombie until its parent (often PID 1) reaps it; that one is done. Anything
  # still running after 10 s gets SIGKILL.
  for (( i=${#SLURM_PIDS[@]}-1; i>=0; i-- )); do
    pid=${SLURM_PIDS[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 100); do _running "$pid" || break; sleep 0.1; done
    _running "$pid" && kill -KILL "$pid" 2>/dev/null
  done
  SLURM_PIDS=()
}

# PIDs of live processes that carry this cluster's SLURM_CONF in their environment (the
# daemons, slurmstepd, job scripts, ranks), other than this shell.
slurm_leftover_processes() {
  local p want="SLURM_CONF=$SLURM_DIR/etc/slurm.conf"
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = $$ ] || [ "$p" = "$BASHPID" ] && continue
    grep -qzxF "$want" "/proc/$p/environ" 2>/dev/null && echo "$p"
  done
}
