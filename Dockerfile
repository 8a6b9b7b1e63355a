# llmrun in a container: NVIDIA's CUDA development image, the Debian/Ubuntu packages of
# scripts/install-deps.sh (the build and run dependencies; the script itself runs, so the
# lists cannot drift), and a Release build on the path as `llmrun`, with the CUDA backend
# (the image has the toolkit). The example asks for no GPU: the CUDA backend is not yet
# verified on one, and `launch.backend: auto` trains on the CPU when none is visible.
#
#   docker build -t llmrun .
#   docker run --rm -v "$PWD/work:/work" llmrun train /work/recipe.yaml
#
# Ubuntu 24.04 is the CUDA image closest to the Debian 12 the project is developed on: every
# package name of install-deps.sh exists there too. The binary is built for x86-64-v3
# (AVX2), not for the build machine's CPU, so the image runs on other hosts.
# tests/docker/check_dockerfile.py checks the packages, paths and CMake options named here.
ARG CUDA_IMAGE=nvidia/cuda:12.6.3-devel-ubuntu24.04
FROM ${CUDA_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /opt/llmrun

# Dependencies first, in their own layer: a source change does not reinstall them.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*

COPY CMakeLists.txt Makefile ./
COPY cmake cmake
COPY kernels kernels
COPY web web
COPY src src
COPY tests tests
COPY recipes recipes
COPY scripts scripts
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLLMRUN_MARCH=x86-64-v3 \
 && cmake --build build -j"$(nproc)" --target llmrun \
 && ln -s /opt/llmrun/build/llmrun /usr/local/bin/llmrun \
 && llmrun --version

# Recipes, data and runs live on a mounted volume; relative paths in a recipe are relative to it.
WORKDIR /work
ENTRYPOINT ["llmrun"]
CMD ["--help"]
