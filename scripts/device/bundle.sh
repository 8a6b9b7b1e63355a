#!/usr/bin/env bash
# Packs what a GPU machine needs to verify this commit into DIR (at most 60 MiB): the llmrun
# binary and its test programs built here (Release, CUDA on, -march=x86-64-v3), every
# non-CUDA shared library they load (the CUDA driver/runtime/cuBLAS/NCCL come from the GPU
# machine; glibc too), recipes, a training text, the PyTorch oracle and run-checks.sh.
#   scripts/device/bundle.sh DIR        then, on the GPU machine:  DIR/run-checks.sh [RESULTS]
# BUNDLE_BUILD (default build-device/) is the build directory; JOBS the parallel jobs;
# BUNDLE_NO_BUILD=1 packs what BUNDLE_BUILD already holds (the e2e test packs its own build);
# BUNDLE_XZ_LEVEL (default 6) the compression level.
# Several ranks too: this machine's OpenMPI launcher travels in payload mpi/ (mpirun, orted, the
# MCA components, PMIx's components, help texts, the parameter files) with every library they
# load; mpi-env.sh points OpenMPI and PMIx there (OPAL_PREFIX and friends), since the GPU
# machine has no Debian packages.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$1
BUILD=${BUNDLE_BUILD:-$SRC/build-device}
LIMIT_MIB=60
TARGETS=(llmrun llmrun_unit_tests llmrun_oracle_dump llmrun_make_model_dir)

# x86-64-v3: the GPU machine's CPU need not have this machine's AVX-512.
if [ -z "${BUNDLE_NO_BUILD:-}" ]; then
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLLMRUN_CUDA=ON -DLLMRUN_MARCH=x86-64-v3 \
    >"$BUILD.configure.log" 2>&1 ||
    { cat "$BUILD.configure.log" >&2; echo "bundle: cmake configure failed" >&2; exit 1; }
  nice cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]}" >"$BUILD.build.log" 2>&1 ||
    { tail -n 40 "$BUILD.build.log" >&2; echo "bundle: build failed (log: $BUILD.build.log)" >&2; exit 1; }
fi

rm -rf "$DIR"
mkdir -p "$DIR"/{share/recipes,share/data,share/oracle,share/scripts}
DIR=$(cd "$DIR" && pwd)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE"/{bin,lib}
for t in "${TARGETS[@]}"; do
  f=$(find "$BUILD" -maxdepth 3 -type f -name "$t" -perm -u+x | head -n 1)
  [ -n "$f" ] || { echo "bundle: $t was not built in $BUILD" >&2; exit 1; }
  strip --strip-unneeded -o "$STAGE/bin/$t" "$f"
done

# OpenMPI (issue 17): the launcher and orted, the MCA components (minus those for fabrics a
# single GPU machine lacks, whose libraries weigh megabytes: UCX, libfabric, verbs, PSM, and
# OpenSHMEM), PMIx's components and help texts. mpi-env.sh names these directories.
command -v ompi_info >/dev/null || { echo "bundle: no OpenMPI here (ompi_info); install openmpi-bin" >&2; exit 1; }
ompi_path() { ompi_info --parsable --path "$1" | sed "s/^path:$1://"; }
mkdir -p "$STAGE"/mpi/{bin,etc,lib/openmpi,lib/pmix,share/openmpi,share/pmix}
cp -L "$(command -v mpirun)" "$STAGE/mpi/bin/mpirun"
cp -L "$(ompi_path bindir)/orted" "$STAGE/mpi/bin/orted"
fabric='lib(ucp|ucs|uct|ucm|fabric|ibverbs|rdmacm|psm|infinipath|efa|oshmem|mca_common_(verbs|ucx|ofi))'
for f in "$(ompi_path pkglibdir)"/*.so; do
  # grep reads all of ldd's output (no -q): under pipefail an early exit's SIGPIPE would fail the
  # pipeline at random and copy a fabric component.
  ldd "$f" | grep -E "$fabric" >/dev/null || cp -L "$f" "$STAGE/mpi/lib/openmpi/"
done
pmix_lib=$(ldd "$STAGE/mpi/lib/openmpi/mca_pmix_ext3x.so" | awk '$1 ~ /^libpmix/ { print $3 }')
pmix_prefix=$(dirname "$(dirname "$(readlink -f "$pmix_lib")")")
cp -L "$pmix_prefix"/lib/pmix/*.so "$STAGE/mpi/lib/pmix/"
cp -rL "$pmix_prefix"/share/pmix/. "$STAGE/mpi/share/pmix/"
cp -rL "$(ompi_path pkgdatadir)"/. "$STAGE/mpi/share/openmpi/"
# The Debian defaults (btl/pml exclusions); PMIx's own file names Debian's component path,
# which mpi-env.sh replaces, so an empty one travels.
cp -L "$(ompi_path sysconfdir)/openmpi-mca-params.conf" "$STAGE/mpi/etc/"
: >"$STAGE/mpi/etc/pmix-mca-params.conf"
strip --strip-unneeded "$STAGE"/mpi/bin/* "$STAGE"/mpi/lib/*/*.so

# Shared libraries: ldd's closure of every binary and MPI component, minus glibc's own libraries (the target's
# glibc must be used with its own loader) and the CUDA stack (driver-matched, on the target).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so|libresolv\.so|libanl\.so|libnsl\.so|libcuda\.so|libcudart\.so|libcublas|libcublasLt|libnccl|libnvidia|libnvrtc|libnvJitLink|libcupti)'
for f in "$STAGE"/bin/* "$STAGE"/mpi/bin/* "$STAGE"/mpi/lib/*/*.so; do
  ldd "$f"
done | awk '/not found/ { print $1, "NOTFOUND"; next } /=>/ { print $1, $3 }' | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  [ "$path" != NOTFOUND ] || { echo "bundle: $name is not found by ldd" >&2; exit 1; }
  cp -L "$path" "$STAGE/lib/$name"
done
chmod 644 "$STAGE"/lib/*
# RUNPATHs name this machine's directories (/usr/lib/x86_64-linux-gnu/openmpi/lib, ...): each
# becomes the bundle's lib/ relative to the file ($ORIGIN), keeping only the CUDA toolkit's
# entries (the CUDA stack comes from the GPU machine), so nothing looks outside the bundle.
# Every file gets one, those that had none too (libopenblas finds libgfortran so): the bundle
# then needs no LD_LIBRARY_PATH, which would hand its libraries (libstdc++, libz, ...) to the
# GPU machine's Python as well.
command -v patchelf >/dev/null || { echo "bundle: needs patchelf (apt-get install patchelf)" >&2; exit 1; }
relink() {  # relink ORIGIN_TO_LIB FILE...
  local to=$1 f old keep; shift
  for f in "$@"; do
    old=$(patchelf --print-rpath "$f" 2>/dev/null) || continue
    keep=$(tr ':' '\n' <<<"$old" | { grep -E '^/usr/local/cuda' || true; } | paste -sd: -)
    patchelf --set-rpath "\$ORIGIN/$to${keep:+:$keep}" "$f"
  done
}
relink ../lib "$STAGE"/bin/*
relink . "$STAGE"/lib/*
relink ../../lib "$STAGE"/mpi/bin/*
relink ../../../lib "$STAGE"/mpi/lib/*/*.so
# Binaries and libraries travel xz-compressed (OpenBLAS alone is 36 MB); run-checks.sh
# unpacks them into a temporary directory.
(cd "$STAGE" && XZ_OPT="-${BUNDLE_XZ_LEVEL:-6} -T${JOBS:-2}" tar -cJf "$DIR/payload.tar.xz" bin lib mpi)

cp "$SRC"/recipes/{demo,llama-small,gpt2-124m}.yaml "$DIR/share/recipes/"
# The training text of the recipes (Debian's licence texts), carried: the GPU machine may not have it.
cp -L /usr/share/common-licenses/* "$DIR/share/data/" 2>/dev/null || cp -rL /usr/share/common-licenses/. "$DIR/share/data/"
cp "$SRC"/tests/oracle/{torch_models,hf_interop,safetensors_np}.py "$DIR/share/oracle/"
cp "$SRC"/scripts/device/{checks,compare_transformers,torch_bench}.py "$DIR/share/scripts/"
cp "$SRC/scripts/device/run-checks.sh" "$DIR/run-checks.sh"
cp "$SRC/scripts/device/mpi-env.sh" "$DIR/share/scripts/"
chmod +x "$DIR/run-checks.sh" "$DIR"/share/scripts/*.py

# Unit tests that find the repository through LLMRUN_SOURCE_DIR or __FILE__ (the enclosing
# TEST of each use):
# run-checks.sh leaves them out.
for f in "$SRC"/tests/unit/*.cpp; do
  awk '/^TEST(_F|_P)?\(/ { t = $0; sub(/^TEST(_F|_P)?\(/, "", t); sub(/\).*/, "", t); gsub(/ /, "", t); sub(/,/, ".", t) }
       /__FILE__|LLMRUN_SOURCE_DIR/ && t != "" { print t }' "$f"
done | sort -u >"$DIR/share/unit-tests-need-source.txt"

glibc=$(for f in "$STAGE"/bin/* "$STAGE"/lib/* "$STAGE"/mpi/bin/* "$STAGE"/mpi/lib/*/*.so; do objdump -T "$f" 2>/dev/null; done |
  grep -oE 'GLIBC_[0-9]+\.[0-9]+' | sort -t. -k2,2n -u | tail -n 1)
commit=$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$SRC" status --porcelain 2>/dev/null | grep -qv '^??' && echo true || echo false)
printf '{"commit": "%s", "dirty": %s, "built": "%s", "host": "%s", "march": "x86-64-v3", "cuda": "%s", "needs_glibc": "%s"}\n' \
  "$commit" "$dirty" "$(date -u +%FT%TZ)" "$(uname -n)" \
  "$(grep -m1 -oE 'LLMRUN_CUDA:[A-Z]+=[A-Za-z]+' "$BUILD/CMakeCache.txt" || echo absent)" "$glibc" >"$DIR/MANIFEST.json"

size=$(du -sbL "$DIR" | cut -f1)
if [ "$size" -gt $((LIMIT_MIB * 1024 * 1024)) ]; then
  du -ahL "$DIR" | sort -h | tail -n 8 >&2
  echo "bundle: $DIR is $((size / 1024 / 1024)) MiB, over the ${LIMIT_MIB} MiB limit" >&2
  exit 1
fi
echo "bundle: $DIR ($((size / 1024 / 1024)) MiB, commit ${commit:0:12}, needs $glibc): run $DIR/run-checks.sh on the GPU machine"
