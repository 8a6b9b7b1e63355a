# scripts/device/bundle.sh packs this build (no rebuild) into a directory under 60 MiB with
# every shared library but glibc's and CUDA's; its run-checks.sh runs from there: GPU checks
# say why they skip, `llmrun generate` on an exported model matches the PyTorch oracle token
# for token, a perturbed model does not, and the summary table and results.json agree. The
# parity arithmetic of checks.py is checked on hand-made metrics files.
source "$(dirname "$0")/common.bash"
cd "$WORK"
CHK="/usr/bin/python3 $SRC/scripts/device/checks.py"
# expect_rc CODE CMD...: runs CMD (stdout in $WORK/cmd.stdout) and checks its exit code.
expect_rc() {
  local want=$1 rc=0; shift
  "$@" >"$WORK/cmd.stdout" 2>"$WORK/cmd.stderr" || rc=$?
  [ "$rc" = "$want" ] || { cat "$WORK/cmd.stdout" "$WORK/cmd.stderr" >&2; fail "'$*' exited $rc, expected $want"; }
}

# --- checks.py parity: per-step relative loss differences -------------------------------
for s in 1 2 3 4 5 6; do echo "{\"step\": $s, \"loss\": $((10 - s)).0}"; done > a.jsonl
cp a.jsonl b.jsonl
echo '{"step": 6, "val_loss": 9.0}' >> b.jsonl  # validation rows are not losses
$CHK parity a.jsonl b.jsonl --tol 1e-4 --steps 6 > p.json || fail "identical curves must agree"
sed 's/"step": 3, "loss": 7.0/"step": 3, "loss": 7.0021/' a.jsonl > c.jsonl  # 3e-4 relative at step 3
expect_rc 1 $CHK parity c.jsonl b.jsonl --tol 1e-4 --steps 6
grep -q '"worst_step": 3' "$WORK/cmd.stdout" || fail "parity must name step 3: $(cat "$WORK/cmd.stdout")"
$CHK parity c.jsonl b.jsonl --tol 1e-4 --after 5 --steps 6 >/dev/null || fail "--after 5 must ignore step 3"
head -n 5 a.jsonl > short.jsonl
expect_rc 1 $CHK parity short.jsonl b.jsonl --tol 1e-4 --steps 6
grep -q '"missing_steps": \[6\]' "$WORK/cmd.stdout" || fail "a missing step must fail the comparison"
expect_exit 1 'PASS, FAIL or' $CHK record r x MAYBE ""

# --- the bundle -------------------------------------------------------------------------
BUNDLE_NO_BUILD=1 BUNDLE_BUILD="$(dirname "$LLMRUN")" BUNDLE_XZ_LEVEL=0 bash "$SRC/scripts/device/bundle.sh" b > bundle.log 2>&1 ||
  { cat bundle.log; fail "bundle.sh failed"; }
size=$(du -sb b | cut -f1)
[ "$size" -le $((60 * 1024 * 1024)) ] || fail "bundle is $size bytes"
tar -tJf b/payload.tar.xz > contents.txt
for f in bin/llmrun bin/llmrun_unit_tests bin/llmrun_oracle_dump bin/llmrun_make_model_dir lib/libopenblas.so.0 lib/libyaml-cpp; do
  grep -q "^$f" contents.txt || fail "payload lacks $f"
done
! grep -qE '^lib/(libc\.so|libm\.so|ld-linux|libcuda)' contents.txt || fail "payload carries glibc or CUDA libraries"
/usr/bin/python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); assert len(m["commit"]) == 40 and m["needs_glibc"].startswith("GLIBC_"), m' b/MANIFEST.json ||
  fail "MANIFEST.json: $(cat b/MANIFEST.json)"
grep -qx 'RepoRecipes.AllLoad' b/share/unit-tests-need-source.txt || fail "tests that read the source tree are not listed"
# OpenMPI's launcher travels (issue 17): the bundle's mpirun starts a dp2 run from a clean
# environment without touching the installed OpenMPI (check-bundled-mpi.sh: loader trace
# always; strace and a mount namespace hiding the installed OpenMPI where this machine has them).
for f in mpi/bin/mpirun mpi/bin/orted mpi/lib/openmpi/mca_pmix_ext3x.so mpi/lib/openmpi/mca_btl_vader.so \
  mpi/lib/pmix/ mpi/share/openmpi/help-mpi-runtime.txt mpi/etc/openmpi-mca-params.conf lib/libpmix.so.2; do
  grep -q "^$f" contents.txt || fail "payload lacks $f"
done
bash "$SRC/scripts/device/check-bundled-mpi.sh" b mpi-check > mpi.txt 2>&1 || { cat mpi.txt; fail "the bundled mpirun"; }
grep -q '^bundled mpirun: PASS (2 ranks' mpi.txt || { cat mpi.txt; fail "the bundled mpirun: no PASS line"; }
cat mpi.txt

# The check table: the parts hold every check once, and every gtest filter a check runs
# matches tests of this build (a filter matching nothing would pass nothing on the GPU).
bash -n b/run-checks.sh || fail "run-checks.sh does not parse"
b/run-checks.sh --list > list.txt || fail "run-checks.sh --list failed"
[ "$(awk '$2 !~ /^part[1234]$/' list.txt)" = "" ] || fail "a check outside part1-4: $(cat list.txt)"
for p in part1 part2 part3 part4; do grep -q " $p\b" list.txt || fail "no check in $p"; done
[ "$(awk '{print $1}' list.txt | sort | uniq -d)" = "" ] || fail "a check is listed twice"
# No `find | head` or `cmd | grep -q` under pipefail: a reader that quits early kills the writer
# with SIGPIPE, and the pipeline then fails or not by timing. find may also meet a directory that
# a test running beside this one (ctest -j) just removed from the build tree.
UNIT=$(find "$(dirname "$LLMRUN")" -maxdepth 3 -type f -name llmrun_unit_tests -print -quit 2>/dev/null || true)
[ -x "$UNIT" ] || fail "llmrun_unit_tests not found next to $LLMRUN"
version=$("$LLMRUN" --version 2>&1)
cuda_build=0; [[ ${version%%$'\n'*} == *[Cc][Uu][Dd][Aa]* ]] && cuda_build=1
while read -r name part filter; do
  [ -n "$filter" ] || continue
  [ $cuda_build = 0 ] && [[ $filter == */cuda* ]] && continue  # no CUDA instances in a CPU-only build
  n=$("$UNIT" --gtest_list_tests --gtest_filter="$filter" | grep -c '^  ' || true)
  [ "$n" -gt 0 ] || fail "check $name: its filter $filter matches no unit test"
done < list.txt
expect_exit 2 'no check named' env CHECKS=no_such_check b/run-checks.sh res-none

# --- run-checks.sh from the bundle --------------------------------------------------------
CHECKS=version,doctor,parity_gpt2_fp32,bench_torch_train,generate_gpt2_vs_torch_oracle b/run-checks.sh res > table.txt 2> checks.log ||
  { cat checks.log table.txt; fail "run-checks.sh failed"; }
grep -qE '^check +result +figure' table.txt || fail "no summary table: $(cat table.txt)"
/usr/bin/python3 - res/results.json "$(command -v nvidia-smi || true)" <<'PY' || { cat table.txt; fail "results.json is wrong"; }
import json, sys
r = json.load(open(sys.argv[1]))
c = {x["check"]: x for x in r["checks"]}
assert list(c) == ["version", "doctor", "parity_gpt2_fp32", "bench_torch_train", "generate_gpt2_vs_torch_oracle"], list(c)
assert c["version"]["result"] == "PASS" and "llmrun" in c["version"]["figure"], c["version"]
if not sys.argv[2]:  # no driver here: every GPU check says so
    assert c["parity_gpt2_fp32"]["result"] == "SKIPPED: no CUDA device", c["parity_gpt2_fp32"]
    assert c["bench_torch_train"]["result"].startswith("SKIPPED: "), c["bench_torch_train"]
g = c["generate_gpt2_vs_torch_oracle"]
assert g["result"] == "PASS" and g["figure"].startswith("48/48 tokens equal"), g
assert r["counts"]["fail"] == 0 and sum(r["counts"].values()) == 5, r["counts"]
assert all(x["detail"].endswith(" s") for x in r["checks"]), r["checks"]
# When and how it ran: the date (UTC) and the command line, CHECKS as given.
assert r["date"].endswith("Z") and r["date"][:2] == "20", r.get("date")
assert r["command"].startswith("CHECKS=version,doctor,") and r["command"].endswith("run-checks.sh res"), r.get("command")
PY
# What comes back from the device tool's $OUT: at most eight files (the logs travel packed).
[ "$(ls res | sort | paste -sd' ')" = "checks.jsonl logs.tar.gz results.json summary.txt" ] || fail "results dir holds: $(ls res)"
# The listing goes to a file: `tar -t | grep -q` failed about 1 run in 20 (tar writes a line at a
# time; grep -q exits at the match and the next write's SIGPIPE fails the pipeline).
tar -tzf res/logs.tar.gz > logs.txt || fail "res/logs.tar.gz does not list"
grep -q 'generate_gpt2_vs_torch_oracle.log' logs.txt || fail "logs.tar.gz lacks the generate log: $(cat logs.txt)"

# The comparison can fail: against the same model with its final norm negated (argmax turns
# into argmin) the tokens differ, and the first mismatch is reported.
cat > tiny.yaml <<'YAML'
model: {arch: gpt2, layers: 1, d_model: 64, heads: 2, seq_len: 64}
data: {tokenizer: byte, train: /usr/share/common-licenses}
train: {steps: 20, micro_batch: 8, global_batch: 8, warmup: 2, lr: 3.0e-3}
checkpoint: {dir: tiny}
YAML
"$LLMRUN" train tiny.yaml 2> tiny.log || { cat tiny.log; fail "training the tiny model failed"; }
CMP="/usr/bin/python3 $SRC/scripts/device/compare_transformers.py --llmrun $LLMRUN --reference oracle --oracle-dir $SRC/tests/oracle --prompt Licence --max-tokens 16"
$CMP --model tiny/model > same.txt || fail "llmrun differs from the oracle on the tiny model: $(tail -n 1 same.txt)"
cp -r tiny/model flipped
/usr/bin/python3 - "$SRC/tests/oracle" flipped/model.safetensors <<'PY' || fail "could not write the perturbed model"
import sys
sys.path.insert(0, sys.argv[1])
import safetensors_np as st
tensors, meta = st.load(sys.argv[2])
tensors["transformer.ln_f.weight"] = -tensors["transformer.ln_f.weight"]
st.save(sys.argv[2], tensors, meta)
PY
expect_rc 1 $CMP --model tiny/model --reference-model flipped
grep -q '"first_mismatch": 0' "$WORK/cmd.stdout" || fail "no mismatch at token 0: $(tail -n 1 "$WORK/cmd.stdout")"
# The transformers path of the comparison, through a stand-in `transformers` package with the
# calls compare_transformers.py makes (from_pretrained, generate with scores), backed by the oracle.
mkdir -p fake/transformers
cat > fake/transformers/__init__.py <<'PY'
import json, os, sys, types
import torch
__version__ = "4.57.1"
class AutoModelForCausalLM:
    @staticmethod
    def from_pretrained(d, attn_implementation, dtype):
        assert attn_implementation == "eager" and dtype == torch.float32
        sys.path.insert(0, os.environ["ORACLE_DIR"])
        import hf_interop, torch_models as tm
        config = json.load(open(os.path.join(d, "config.json")))
        return _Model(tm.build_model(config, tm.make_params(config, hf_interop.load_dir(d))))
class _Model:
    def __init__(self, m):
        self.m = m
    def eval(self):
        return self
    def generate(self, ids, attention_mask, max_new_tokens, do_sample, num_beams, eos_token_id, pad_token_id,
                 output_scores, return_dict_in_generate):
        assert not do_sample and num_beams == 1 and output_scores and return_dict_in_generate
        scores = []
        for _ in range(max_new_tokens):
            logits = self.m.forward(ids)[:, -1]
            scores.append(logits)
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
        return types.SimpleNamespace(sequences=ids, scores=scores)
PY
PYTHONPATH=$WORK/fake ORACLE_DIR=$SRC/tests/oracle $CMP --model tiny/model --reference transformers > tf.txt ||
  fail "transformers path: $(tail -n 2 tf.txt)"
grep -q '"reference": "transformers"' tf.txt && grep -q '"result": "PASS"' tf.txt || fail "transformers path: $(tail -n 1 tf.txt)"
echo "device bundle: $((size / 1024 / 1024)) MiB; $(grep -c . res/checks.jsonl) checks run"
