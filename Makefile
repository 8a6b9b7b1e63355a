# Thin wrapper over CMake. `make demo` and `make test` are the two commands of the README.
# `make demo` installs what building and running llmrun needs and builds only the binary;
# `make test` adds the test-only packages (scripts/install-test-deps.sh) and builds everything.
BUILD ?= build
JOBS ?= $(shell nproc)

# Serial: the two dependency scripts must not run apt-get at the same time (cmake does the
# parallel part).
.NOTPARALLEL:

.PHONY: deps test-deps configure llmrun build test test-full test-slurm demo format format-check deps-check clean

deps:
	@bash scripts/install-deps.sh

test-deps:
	@bash scripts/install-test-deps.sh

configure: deps
	@mkdir -p $(BUILD) && cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > $(BUILD)/configure.log || \
	  { cat $(BUILD)/configure.log; exit 1; }
	@sed -n 's/^-- \(CUDA backend: .*\)/\1/p' $(BUILD)/configure.log

# The binary alone: what `make demo` and the Dockerfile need.
llmrun: configure
	@cmake --build $(BUILD) -j $(JOBS) --target llmrun

build: test-deps configure
	@cmake --build $(BUILD) -j $(JOBS)

# CTest does not print a skipped test's output; its reason ("SKIPPED: ...") is shown after.
test: build
	@cd $(BUILD) && { ctest --output-on-failure -j 2; rc=$$?; \
	  grep -h '^SKIPPED:' Testing/Temporary/LastTest.log 2>/dev/null | sort -u; exit $$rc; }

# The Slurm integration test alone (also part of `make test`): starts a private munge +
# slurmctld + slurmd, runs scripts/slurm/train.sbatch through two requeues, stops them.
test-slurm: build
	@bash tests/slurm/run.sh $(BUILD)/llmrun .

# The whole tensor x pipeline x data parallel equivalence matrix (CI runs a subset).
test-full: build
	@cd $(BUILD) && LLMRUN_TEST_FULL=1 ctest --output-on-failure -j 2

demo: llmrun
	@bash scripts/demo.sh $(BUILD)/llmrun

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')

# Lists the files `make format` would change; fails when there are any.
format-check:
	@bash scripts/check-format.sh

# The folder dependency rule of docs/ARCHITECTURE.md (also CTest structure.deps).
deps-check:
	@bash scripts/check-deps.sh

clean:
	@rm -rf $(BUILD)
