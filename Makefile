# Thin wrapper over CMake. `make demo` and `make test` are the two commands of the README.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps configure build test test-full demo format clean

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j 2

# The whole tensor x pipeline x data parallel equivalence matrix (CI runs a subset).
test-full: build
	@cd $(BUILD) && LLMRUN_TEST_FULL=1 ctest --output-on-failure -j 2

demo: build
	@bash scripts/demo.sh $(BUILD)/llmrun

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	@rm -rf $(BUILD)
