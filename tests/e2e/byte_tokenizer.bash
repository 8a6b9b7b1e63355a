# make_byte_tokenizer TEXT: the byte-level tokenizer files as llmrun writes them, in
# tok/model/ (tokenizer.json, tokenizer_config.json), from a one-step run on TEXT. For tests
# that write Hugging Face dirs themselves (sourced after common.bash; not a test itself).
make_byte_tokenizer() {
  cat > tok.yaml <<YAML
model: {arch: gpt2, layers: 1, d_model: 16, heads: 2, seq_len: 16}
data: {tokenizer: byte, train: [{path: $1}]}
train: {steps: 1, micro_batch: 1}
checkpoint: {dir: tok}
YAML
  "$LLMRUN" train tok.yaml 2>/dev/null || fail "tokenizer run failed"
}
