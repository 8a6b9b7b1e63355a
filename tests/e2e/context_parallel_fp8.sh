# FP8 (precision.fp8, CPU emulation) with context parallelism: each cp rank casts its own
# tokens' inputs and output gradients, and every amax is max-reduced over all ranks (cp ranks
# included), so every rank uses the scales one rank would. cp2 on the p2p ring and under a2a,
# cp2 x dp2 and cp2 x tp2 with sequence parallelism reproduce the one-rank FP8 loss curve within
# 1e-5 (relative, every step of 10), with the same over/underflow counts (weights, which every
# cp rank casts whole, counted once) and the same scales at step 10; a checkpoint saved at cp2
# resumes at one rank with the one-rank losses.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/fp8_layout_common.bash"
cd "$WORK"
fp8_layout_setup "fp8 context parallel"
run base 1
run cp2 2 parallel.cp=2
run cp2-a2a 2 parallel.cp=2 parallel.cp_comm=a2a
run cp2-dp2 4 parallel.cp=2 parallel.dp=2
run cp2-tp2-sp 4 parallel.cp=2 parallel.tp=2 parallel.sequence_parallel=true
for name in cp2 cp2-a2a cp2-dp2 cp2-tp2-sp; do compare base $name 1 1e-5; done

# A checkpoint of step 5 at cp2 (scales and amax histories included) resumes at one rank.
run cp2-to-1 1 checkpoint.resume=$WORK/cp2/step-0000005
grep -q "resumed from .*step-0000005" cp2-to-1.log || { cat cp2-to-1.log; fail "cp2-to-1 did not resume at step 5"; }
compare base cp2-to-1 6 1e-5
echo "fp8 context parallel: cp2 (p2p, a2a), cp2 x dp2, cp2 x tp2 + sp and a cp2 resume match one rank"
