#!/usr/bin/env bash
# Where Slurm cannot start, slurm.requeue is skipped, and its one SKIPPED line must carry the
# daemon's own reason (no cgroup filesystem, an unresolvable host name, ...), from its log
# and its stderr alike. Stand-in daemons on PATH play a munge and slurmctld that start and a
# slurmd that fails; run.sh must print their words, exit 77 and leave no process behind.
#
# usage: skip_reason.sh SRCDIR
set -uo pipefail
SRC=$(readlink -f "$1")
FAKE=$(mktemp -d /tmp/llmrun-slurm-fake.XXXXXX)
trap 'rm -rf "$FAKE"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A daemon that starts: a detached sleep, its pid where the real daemon writes its own.
cat > "$FAKE/daemon" <<'SH'
#!/usr/bin/env bash
pidfile=""
for a in "$@"; do case $a in --pid-file=*) pidfile=${a#--pid-file=} ;; esac; done
[ -n "$SLURM_CONF" ] && [ -z "$pidfile" ] && pidfile=$(sed -n 's/^SlurmctldPidFile=//p' "$SLURM_CONF")
setsid sleep 300 </dev/null >/dev/null 2>&1 &
echo $! > "$pidfile"
SH
cat > "$FAKE/mungekey" <<'SH'
#!/usr/bin/env bash
while [ $# -gt 0 ]; do [ "$1" = -k ] && touch "$2"; shift; done
SH
cat > "$FAKE/slurmd" <<'SH'
#!/usr/bin/env bash
log=$(sed -n 's/^SlurmdLogFile=//p' "$SLURM_CONF")
printf '[2026-01-01T00:00:00.000] error: cgroup namespace mount missing (stand-in)\n' >> "$log"
echo 'slurmd: fatal: Unable to determine this slurmd address (stand-in)' >&2
exit 1
SH
chmod +x "$FAKE/daemon" "$FAKE/mungekey" "$FAKE/slurmd"
ln -s daemon "$FAKE/munged"
ln -s daemon "$FAKE/slurmctld"
for tool in sbatch scontrol squeue sinfo scancel srun; do printf '#!/bin/sh\nexit 1\n' > "$FAKE/$tool"; chmod +x "$FAKE/$tool"; done

out=$(PATH="$FAKE:$PATH" bash "$SRC/tests/slurm/run.sh" /bin/true "$SRC" 2>&1)
rc=$?
sed "s/^/run.sh: /" <<<"$out"  # prefixed: its stand-in SKIPPED line is not this run's
[ $rc = 77 ] || fail "run.sh exited $rc, expected 77 (skipped)"
line=$(grep '^SKIPPED:' <<<"$out")
[ "$(grep -c '^SKIPPED:' <<<"$out")" = 1 ] || fail "expected one SKIPPED line"
grep -q 'slurmd did not start: ' <<<"$line" || fail "SKIPPED line does not name slurmd"
grep -q 'error: cgroup namespace mount missing (stand-in)' <<<"$line" || fail "SKIPPED line lacks slurmd.log's reason"
grep -q 'fatal: Unable to determine this slurmd address (stand-in)' <<<"$line" || fail "SKIPPED line lacks slurmd's stderr"
echo "slurm skip reason: ok"
