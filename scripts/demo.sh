#!/usr/bin/env bash
# `make demo`: trains recipes/demo.yaml on the licence texts every Debian machine has, then
# samples from the saved model.
set -euo pipefail
LLMRUN=${1:-build/llmrun}
cd "$(dirname "$0")/.."
"$LLMRUN" train recipes/demo.yaml
echo
# The prompt is 30 bytes (tokens, with the byte tokenizer) and the model's context 128: 98 new
# tokens fill it (generate stops at the context and says so when asked for more).
echo "== llmrun generate runs/demo/model --prompt 'The GNU General Public License' --max-tokens 98"
"$LLMRUN" generate runs/demo/model --prompt "The GNU General Public License" --max-tokens 98 --temperature 0
