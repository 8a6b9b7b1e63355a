# Thin wrapper over CMake. `make demo` and `make test` are the two commands of the README.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps configure build test demo format clean

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j 2

demo: build
	@bash scripts/demo.sh $(BUILD)/llmrun

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	@rm -rf $(BUILD)
