#!/usr/bin/env bash
# Installs what `make test` needs on top of scripts/install-deps.sh: the PyTorch oracles,
# Node and npm (the tokenizer oracle and the official `openai` client, installed from npm into
# the build tree by the tests themselves), a private Slurm cluster, and the tools the shell
# tests call. Debian 12's own nodejs (18.x) is enough; a newer one already installed is used.
set -euo pipefail

TEST_PACKAGES=(
  python3-torch python3-numpy   # tests/oracle: the independent PyTorch implementation
  nodejs                        # tests/tokenizer, tests/e2e/serve_openai.sh
  slurm-wlm munge               # tests/slurm: a private single-node cluster
  chromium chromium-driver      # tests/browser: the dashboard and playground in headless chromium
  curl                          # the serving tests
  bc                            # tests/slurm/run.sh's timestamps
  procps                        # ps, pgrep: tests/e2e/dp_faults.sh, tests/slurm
  clang-format git              # structure.format: tracked sources match .clang-format
  patchelf strace               # scripts/device/bundle.sh's RUNPATHs; its bundled mpirun's trace
)
# Some nodejs builds (NodeSource's) ship npm inside and conflict with Debian's npm package.
command -v npm >/dev/null || TEST_PACKAGES+=(npm)

exec bash "$(dirname "$0")/install-deps.sh" "${TEST_PACKAGES[@]}"
