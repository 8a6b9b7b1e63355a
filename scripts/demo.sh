#!/usr/bin/env bash
# `make demo`: trains recipes/demo.yaml on the licence texts every Debian machine has, then
# samples from the saved model.
set -euo pipefail
LLMRUN=${1:-build/llmrun}
cd "$(dirname "$0")/.."
"$LLMRUN" train recipes/demo.yaml
echo
echo "== llmrun generate runs/demo/model --prompt 'The GNU General Public License' --max-tokens 200"
"$LLMRUN" generate runs/demo/model --prompt "The GNU General Public License" --max-tokens 200 --temperature 0
