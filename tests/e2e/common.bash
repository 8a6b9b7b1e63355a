# Shared helpers for the end-to-end tests: each test gets the llmrun binary and the source
# dir as $1 and $2, works in a private temp dir, and fails loudly.
set -euo pipefail
LLMRUN="$1"
SRC="$2"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
# Under pipefail, `CMD | grep -q` (or `| head`) fails at random when CMD writes more after the
# match: grep exits, CMD dies of SIGPIPE. Tests write `CMD | grep PAT >/dev/null`, or
# `grep -q PAT <<<"$VAR"` for a variable.

# expect_exit CODE PATTERN CMD... : runs CMD, checks its exit code and that stderr matches PATTERN.
expect_exit() {
  local want=$1 pattern=$2; shift 2
  local rc=0
  "$@" >"$WORK/cmd.stdout" 2>"$WORK/cmd.stderr" || rc=$?
  [ "$rc" = "$want" ] || { cat "$WORK/cmd.stderr" >&2; fail "'$*' exited $rc, expected $want"; }
  grep -qE -- "$pattern" "$WORK/cmd.stderr" || { cat "$WORK/cmd.stderr" >&2; fail "'$*': stderr lacks /$pattern/"; }
}
