#!/usr/bin/env bash
# Proves a bundle's OpenMPI launcher (bundle.sh's payload mpi/) works on its own: the bundle's
# mpirun starts two llmrun ranks (a tiny dp2 training run on the CPU) from a clean environment
# (env -i, then mpi-env.sh), and none of the installed OpenMPI, PMIx, libevent or hwloc is
# touched. Three guards, each used where this machine allows it:
#   - loader trace (LD_DEBUG=files, always): every shared object any process loads, the MCA
#     components included (they are dlopen'ed), comes from the bundle or is glibc's;
#   - strace -f (where installed): no file under the installed OpenMPI/PMIx directories is
#     opened, or even looked for;
#   - a private mount namespace (unshare -m, where permitted, e.g. root with CAP_SYS_ADMIN):
#     those directories are hidden under empty tmpfs mounts and every installed copy of a
#     library the bundle carries is covered by /dev/null, as on the GPU machine.
#   scripts/device/check-bundled-mpi.sh BUNDLE_DIR [WORK_DIR]
# Prints one line per guard and "bundled mpirun: PASS (...)"; exit 1 with the reason otherwise.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BUNDLE_DIR [WORK_DIR]" >&2; exit 2; }
B=$(cd "$1" && pwd)
W=${2:-$(mktemp -d)}
mkdir -p "$W" && W=$(cd "$W" && pwd)
fail() { echo "bundled mpirun: FAIL: $*" >&2; exit 1; }
P=$W/payload
rm -rf "$P" && mkdir -p "$P"
tar -xJf "$B/payload.tar.xz" -C "$P"
[ -x "$P/mpi/bin/mpirun" ] || fail "the bundle carries no mpi/bin/mpirun"

# Debian's OpenMPI and PMIx directories (what bundle.sh copied from).
sys_dirs=(/usr/lib/x86_64-linux-gnu/openmpi /usr/share/openmpi /etc/openmpi /usr/lib/x86_64-linux-gnu/pmix2)

cat >"$W/tiny.yaml" <<YAML
model: {arch: gpt2, layers: 1, d_model: 32, heads: 2, seq_len: 32}
data: {tokenizer: byte, train: $B/share/data}
train: {steps: 4, micro_batch: 4, global_batch: 8, warmup: 1, lr: 1.0e-3}
parallel: {dp: 2}
checkpoint: {dir: $W/ck, every: 0}
logging: {every: 1, metrics: $W/metrics.jsonl}
YAML

# The command, from a clean environment: only the bundle's variables.
cat >"$W/run.sh" <<SH
#!/bin/bash
. "$B/share/scripts/mpi-env.sh" "$P"
cd "$W"
exec "\$@" mpirun -n 2 "$P/bin/llmrun" train "$W/tiny.yaml"
SH
chmod +x "$W/run.sh"
clean_env=(env -i PATH=/usr/bin:/bin HOME="$W" TMPDIR=/tmp OMP_NUM_THREADS=1 LANG=C)
inner=(env LD_DEBUG=files LD_DEBUG_OUTPUT="$W/ld")

# The namespace: every installed copy of a library the bundle carries, by name and by real
# path, is covered with /dev/null; the installed OpenMPI directories with empty tmpfs.
hide=()
for l in "$P"/lib/*; do
  for d in /usr/lib/x86_64-linux-gnu /usr/lib /usr/local/lib; do
    if [ -e "$d/$(basename "$l")" ]; then hide+=("$(readlink -f "$d/$(basename "$l")")"); fi
  done
done
hide+=($(readlink -f /usr/bin/orterun /usr/bin/orted 2>/dev/null || true))
cat >"$W/hide.sh" <<'SH'
#!/bin/bash
# hide.sh LIBDIR DIRS... -- FILES... -- COMMAND...: runs COMMAND with DIRS and FILES hidden.
# mount itself loads libraries being hidden (libpcre2, libz): it takes the bundle's copies.
set -e
export LD_LIBRARY_PATH=$1; shift
while [ "$1" != -- ]; do [ -d "$1" ] && mount -t tmpfs none "$1"; shift; done; shift
while [ "$1" != -- ]; do [ -f "$1" ] && mount --bind /dev/null "$1"; shift; done; shift
unset LD_LIBRARY_PATH
exec "$@"
SH
chmod +x "$W/hide.sh"
guards=("loader trace")
ns=()
mkdir -p "$W/probe"
if unshare -m --propagation private mount -t tmpfs none "$W/probe" 2>/dev/null; then
  ns=(unshare -m --propagation private "$W/hide.sh" "$P/lib" "${sys_dirs[@]}" -- $(printf '%s\n' "${hide[@]}" | sort -u) --)
  guards+=("mount namespace hiding ${#sys_dirs[@]} directories and $(printf '%s\n' "${hide[@]}" | sort -u | wc -l) installed libraries")
fi
tracer=()
if command -v strace >/dev/null 2>&1; then
  tracer=(strace -f -qq -e trace=openat,open,stat,newfstatat,access,execve -o "$W/strace.log")
  guards+=("strace")
fi

rm -f "$W"/ld.* "$W/strace.log" "$W/metrics.jsonl"
start=$(date +%s%N)
if ! "${ns[@]}" "${clean_env[@]}" "$W/run.sh" "${tracer[@]}" "${inner[@]}" >"$W/train.log" 2>&1; then
  tail -n 20 "$W/train.log" >&2
  fail "mpirun -n 2 llmrun train failed (log: $W/train.log)"
fi
secs=$((($(date +%s%N) - start) / 1000000000))
grep -q 'data parallel 2 ranks' "$W/train.log" || fail "the run did not form a 2-rank dp group: $(tail -n 3 "$W/train.log")"
steps=$(grep -c '"loss"' "$W/metrics.jsonl" || true)
[ "$steps" -ge 4 ] || fail "the run logged $steps of 4 steps"

# Loader trace: every object any process initialised (ld.so's "calling init: PATH", linked or
# dlopen'ed, in every process: mpirun, its ranks) is under the payload, glibc's or CUDA's.
paths=$(cat "$W"/ld.* | grep -oE 'calling init: [^ ]+' | sed 's/calling init: //' | sort -u)
[ -n "$paths" ] || fail "LD_DEBUG recorded no objects (files: $(ls "$W" | grep -c '^ld\.'))"
# glibc's own libraries and the CUDA stack: the GPU machine provides both (bundle.sh's rule).
glibc='/(ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libutil|libresolv|libnss_[a-z]+|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia[a-z-]*)\.so'
foreign=$(grep -vE "^$P/|$glibc" <<<"$paths" || true)
[ -z "$foreign" ] || fail "objects loaded from outside the bundle: $(paste -sd' ' <<<"$foreign")"
ncomp=$(grep -c "^$P/mpi/lib/" <<<"$paths" || true)
[ "$ncomp" -ge 10 ] || fail "only $ncomp MCA components were loaded from the bundle"
echo "loader trace: $(wc -l <<<"$paths") objects initialised, $ncomp of them the bundle's MCA/PMIx components, none from outside the bundle but glibc's and the CUDA stack's"

if [ ${#tracer[@]} -gt 0 ]; then
  re=$(printf '%s|' "${sys_dirs[@]}" /usr/bin/orted /usr/bin/orterun /usr/bin/mpirun)
  touched=$(grep -E "\"(${re%|})" "$W/strace.log" | head -n 5 || true)
  [ -z "$touched" ] || fail "the run looked at the installed OpenMPI: $touched"
  execs=$(grep -oE 'execve\("[^"]+' "$W/strace.log" | sed 's/execve("//' | sort -u | paste -sd' ')
  echo "strace: $(wc -l <"$W/strace.log") calls traced, none under ${sys_dirs[*]}; executed: $execs"
fi
[ ${#ns[@]} -gt 0 ] && echo "mount namespace: the run saw ${sys_dirs[*]} empty and the installed libopen-pal, libpmix, libmpi, libevent, libhwloc, ... as /dev/null"
echo "bundled mpirun: PASS (2 ranks, $steps steps in $secs s; guards: $(IFS=,; echo "${guards[*]}"))"
