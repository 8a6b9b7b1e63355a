#!/usr/bin/env bash
# Proves the README's path on a bare Debian 12: debootstraps a minbase bookworm root, gives it
# the host's Debian mirror, apt settings, CA certificates and npm configuration (read from the
# host at run time), clones this checkout into it, and runs the README's commands there as
# root: the prerequisites (git, make), `make demo`, then `make test`, timing each. Heavy
# (several GB; a full dependency install, build and test run), so not part of `make test`.
#
# usage: scripts/check-fresh.sh [DIR]    as root; DIR (default /var/tmp/llmrun-fresh) is wiped
# Logs go to DIR/logs/, the summary (times, package counts, disk, test result) to stdout and
# DIR/logs/summary.txt. Only committed work is tested: the root gets a `git clone` of HEAD.
# Exit status: that of `make test` (or of the first step that failed).
set -euo pipefail

SRC=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
REV=$(git -C "$SRC" rev-parse --short HEAD)  # what the clone gets, even if HEAD moves meanwhile
DIR=${1:-/var/tmp/llmrun-fresh}
ROOT=$DIR/root
LOGS=$DIR/logs
SUITES_RE='^bookworm(-updates|-security)?$'  # what a bookworm system draws from; not backports

die() { echo "check-fresh: $*" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap and chroot need it)"
[ -z "$(git -C "$SRC" status --porcelain --untracked-files=no)" ] ||
  echo "check-fresh: note: uncommitted changes in $SRC are not part of the clone" >&2

# The host's apt entries for Debian's bookworm suites, verbatim: deb822 paragraphs from
# *.sources, one-line entries from *.list. Other repositories (a newer Node's, a cloud SDK's)
# stay out, so the root gets what Debian itself ships.
host_debian_sources() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v re="$SUITES_RE" 'BEGIN { RS = ""; ORS = "\n\n" }
      { ok = 0; off = 0
        n = split($0, lines, "\n")
        for (i = 1; i <= n; i++) {
          if (lines[i] ~ /^Enabled:[ \t]*no/) off = 1
          if (lines[i] ~ /^Suites:/) {
            m = split(substr(lines[i], 8), s, /[ \t]+/); ok = 1; any = 0
            for (j = 1; j <= m; j++) if (s[j] != "") { any = 1; if (s[j] !~ re) ok = 0 }
            if (!any) ok = 0
          }
        }
        if (ok && !off) print }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v re="$SUITES_RE" '$1 == "deb" { l = $0; sub(/\[[^]]*\][ \t]*/, "", l); split(l, w, /[ \t]+/)
      if (w[3] ~ re) print }' "$f"
  done
}
# debootstrap's mirror: the first URI serving the bookworm suite itself.
host_debian_mirror() {
  host_debian_sources | awk '
    /^URIs:/ { uri = $2 } /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm" && uri != "") { print uri; exit } }
    $1 == "deb" { l = $0; sub(/\[[^]]*\][ \t]*/, "", l); split(l, w, /[ \t]+/); if (w[3] == "bookworm") { print w[2]; exit } }'
}

mounted=()
cleanup() {
  local i
  for (( i=${#mounted[@]}-1; i>=0; i-- )); do
    umount -R "${mounted[i]}" 2>/dev/null || umount -R -l "${mounted[i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT
bind() { mkdir -p "$ROOT$1"; mount --rbind "$1" "$ROOT$1"; mount --make-rslave "$ROOT$1"; mounted+=("$ROOT$1"); }

# Every step's wall time, and the CPU time of its processes (user + system: on a machine
# shared with other work the wall time grows, the CPU time hardly), printed with the summary.
declare -a STEP_NAMES=() STEP_TIMES=() STEP_CPU=()
# Seconds of CPU the waited-for children of this shell used so far. `times` must run in this
# shell itself (in a $(...) subshell it would count the subshell's children), hence the file.
children_cpu() {
  times > "$LOGS/.times"
  awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] } printf "%d", t }' "$LOGS/.times"
}
timed() {
  local name=$1 log=$2 t0 c0 c1 rc=0; shift 2
  echo "check-fresh: $name ... (log: $log)"
  t0=$(date +%s); children_cpu > "$LOGS/.cpu0"; c0=$(cat "$LOGS/.cpu0")
  "$@" >"$log" 2>&1 || rc=$?
  children_cpu > "$LOGS/.cpu1"; c1=$(cat "$LOGS/.cpu1")
  STEP_NAMES+=("$name"); STEP_TIMES+=("$(( $(date +%s) - t0 ))"); STEP_CPU+=("$(( c1 - c0 ))")
  echo "check-fresh: $name: $(fmt_time "${STEP_TIMES[-1]}") (CPU $(fmt_time "${STEP_CPU[-1]}")), exit $rc"
  return $rc
}
fmt_time() { printf '%dm%02ds' $(( $1 / 60 )) $(( $1 % 60 )); }
in_root() {
  chroot "$ROOT" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "$1"
}
packages() { in_root "dpkg-query -W -f='\${Status}\n' | grep -c 'install ok installed'"; }
disk() { du -sh --one-file-system "$ROOT" 2>/dev/null | cut -f1; }

command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }
mirror=$(host_debian_mirror)
[ -n "$mirror" ] || die "no Debian bookworm entry in /etc/apt/sources.list{,.d/*}"

if [ -d "$DIR" ]; then
  findmnt -rn -o TARGET | grep -q "^$ROOT/" && die "$ROOT still has mounts from an earlier run: umount -R them first"
  rm -rf "$DIR"
fi
mkdir -p "$LOGS"
echo "check-fresh: $SRC at $REV -> $ROOT (mirror $mirror)"

timed "debootstrap minbase bookworm" "$LOGS/debootstrap.log" \
  debootstrap --variant=minbase bookworm "$ROOT" "$mirror"

# The host's registry configuration: Debian entries, apt's Acquire settings (proxies,
# validity), CA certificates (a registry behind a TLS-inspecting proxy needs its CA), npm's
# settings, and name resolution.
rm -f "$ROOT"/etc/apt/sources.list "$ROOT"/etc/apt/sources.list.d/*
host_debian_sources > "$ROOT/etc/apt/sources.list.d/debian.sources.tmp"
if grep -q '^deb ' "$ROOT/etc/apt/sources.list.d/debian.sources.tmp"; then
  grep '^deb ' "$ROOT/etc/apt/sources.list.d/debian.sources.tmp" > "$ROOT/etc/apt/sources.list"
  grep -v '^deb ' "$ROOT/etc/apt/sources.list.d/debian.sources.tmp" > "$ROOT/etc/apt/sources.list.d/debian.sources" || true
else
  mv "$ROOT/etc/apt/sources.list.d/debian.sources.tmp" "$ROOT/etc/apt/sources.list.d/debian.sources"
fi
rm -f "$ROOT/etc/apt/sources.list.d/debian.sources.tmp"
for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
  [ -f "$f" ] && grep -q 'Acquire' "$f" && cp "$f" "$ROOT$f"
done
mkdir -p "$ROOT/usr/local/share/ca-certificates" "$ROOT/etc/ssl/certs"
cp -r /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/" 2>/dev/null || true
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/"
for f in /etc/npmrc /root/.npmrc; do [ -f "$f" ] && cp "$f" "$ROOT$f"; done
cp /etc/hosts /etc/resolv.conf "$ROOT/etc/"

bind /proc; bind /sys; bind /dev

git clone -q "$SRC" "$ROOT/root/llmrun"
git -C "$ROOT/root/llmrun" checkout -q "$REV"
pkgs_base=$(packages)
timed "prerequisites (apt-get install git make)" "$LOGS/prereq.log" \
  in_root "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends git make ca-certificates"
pkgs_pre=$(packages); disk_pre=$(disk)
rc=0
timed "make demo" "$LOGS/demo.log" in_root "cd /root/llmrun && make demo" || rc=$?
pkgs_demo=$(packages); disk_demo=$(disk)
if [ $rc -eq 0 ]; then
  timed "make test" "$LOGS/test.log" in_root "cd /root/llmrun && make test" || rc=$?
fi
pkgs_test="not run"; disk_test="not run"
[ -f "$LOGS/test.log" ] && { pkgs_test=$(packages); disk_test=$(disk); }

{
  echo "== check-fresh summary: llmrun $REV on a minbase bookworm root, $(nproc) cores"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  for i in "${!STEP_NAMES[@]}"; do
    printf '%-45s wall %-8s CPU %s\n' "${STEP_NAMES[i]}" "$(fmt_time "${STEP_TIMES[i]}")" "$(fmt_time "${STEP_CPU[i]}")"
  done
  echo "packages: minbase $pkgs_base, + prerequisites $pkgs_pre, after make demo $pkgs_demo, after make test $pkgs_test"
  echo "root size: with prerequisites $disk_pre, after make demo $disk_demo, after make test $disk_test"
  echo "-- make demo, last lines:"; tail -n 6 "$LOGS/demo.log" 2>/dev/null
  if [ -f "$LOGS/test.log" ]; then
    echo "-- make test:"
    grep -E 'tests passed|tests failed out of|^SKIPPED:|\(Failed\)|\(Timeout\)|\(Not Run\)|\*\*\*Failed|Skipped' "$LOGS/test.log" | tail -n 20
  fi
  echo "exit $rc"
} | tee "$LOGS/summary.txt"
exit $rc
