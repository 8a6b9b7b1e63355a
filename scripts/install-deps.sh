#!/usr/bin/env bash
# Installs the Debian packages that building and running llmrun needs (`make demo`, `make
# build`, the Dockerfile). scripts/install-test-deps.sh passes the test-only packages as
# arguments, so that both lists go through one apt-get call. Idempotent: does nothing when
# every package is present. Debian 12 and Ubuntu 24.04 carry every name below.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libcli11-dev libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libopenblas-openmp-dev
  openmpi-bin libopenmpi-dev
  libboost-dev
  libpcre2-dev libutf8proc-dev
  libgtest-dev googletest   # CMake's configure step finds GoogleTest even when only llmrun is built
  librsvg2-bin      # rsvg-convert: `llmrun plot -o curves.png`
)

wanted=("${PACKAGES[@]}" "$@")
missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#wanted[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo (missing: ${missing[*]})" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
