# The llmrun binary's OpenMP threads spin briefly before they sleep (src/cli/omp_wait_default.cpp):
# GOMP_SPINCOUNT reads 1000 to libgomp unless the user sets it or OMP_WAIT_POLICY, and every
# other environment variable still reads as set.
source "$(dirname "$0")/common.bash"
spin() {  # spin [VAR=VALUE...]: the spin count libgomp reports for llmrun in that environment
  env "$@" OMP_DISPLAY_ENV=verbose "$LLMRUN" --version 2>&1 >/dev/null |
    sed -n "s/^ *GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p"
}
[ "$(spin)" = 1000 ] || fail "default spin count: got '$(spin)', expected 1000"
[ "$(spin GOMP_SPINCOUNT=77)" = 77 ] || fail "GOMP_SPINCOUNT=77 not honoured: $(spin GOMP_SPINCOUNT=77)"
[ "$(spin OMP_WAIT_POLICY=passive)" = 0 ] || fail "OMP_WAIT_POLICY=passive: $(spin OMP_WAIT_POLICY=passive)"
[ "$(spin OMP_WAIT_POLICY=active)" != 1000 ] || fail "OMP_WAIT_POLICY=active got the default"
# another variable still reads as set (llmrun's own LLMRUN_LOG check)
expect_exit 2 'LLMRUN_LOG=loud: expected one of' env LLMRUN_LOG=loud "$LLMRUN" --version
echo "e2e.omp_spin_default: ok"
