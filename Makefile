# SPDX-License-Identifier: Apache-2.0
# The README's commands: `make demo` and `make test`. Both install missing Debian packages.
BUILD ?= build
PREFIX ?= /usr/local
JOBS := $(shell nproc)

.PHONY: all build deps test demo install bench diloco-demo diloco-demo-whole clean format format-check fuzz

all: build

deps:
	@scripts/deps.sh build

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DSTRATA_WERROR=ON -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

test:
	@scripts/deps.sh test
	@scripts/test.sh

demo: build
	@scripts/demo.sh $(BUILD)

# The benchmarks' Python (torch 2.13, numpy) is the suite's venv, build-venv (scripts/venv.sh).
bench: build
	@scripts/deps.sh bench
	@scripts/venv.sh build-venv
	@cmake -S . -B $(BUILD) -DPython3_EXECUTABLE=$(CURDIR)/build-venv/bin/python >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)
	@STRATA_PYTHON=$(CURDIR)/build-venv/bin/python bench/run.sh
	@STRATA_PYTHON=$(CURDIR)/build-venv/bin/python BUILD=$(BUILD) bench/encrypt.sh

# DiLoCo against synchronous HSDP on 2 emulated WAN sites x 2 ranks, FSDP2 inside the sites, a
# site killed and restarted (root; docs/diloco.md, "The demonstration").
diloco-demo: build
	@scripts/deps.sh diloco
	@scripts/venv.sh build-venv
	@cmake -S . -B $(BUILD) -DPython3_EXECUTABLE=$(CURDIR)/build-venv/bin/python >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)
	@STRATA_PYTHON=$(CURDIR)/build-venv/bin/python BUILD=$(BUILD) bench/diloco/run_sharded.sh

# DiLoCo with the model whole at one rank per site: seven variants against synchronous data
# parallel (root; docs/diloco.md, "One rank per site").
diloco-demo-whole: build
	@scripts/deps.sh diloco
	@scripts/venv.sh build-venv
	@cmake -S . -B $(BUILD) -DPython3_EXECUTABLE=$(CURDIR)/build-venv/bin/python >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)
	@STRATA_PYTHON=$(CURDIR)/build-venv/bin/python BUILD=$(BUILD) bench/diloco/run.sh

# Every libFuzzer harness (tests/fuzz/fuzz_*.c) for FUZZ_SECONDS each, one after another, built
# with clang in build-fuzz; FUZZ=name runs one. Fails on any crash, hang or leak
# (tests/fuzz/README.md).
FUZZ_SECONDS ?= 60
FUZZ ?=
fuzz:
	@scripts/deps.sh fuzz
	@tests/fuzz/run.sh --build build-fuzz --seconds $(FUZZ_SECONDS) $(FUZZ)

install: build
	@cmake --install $(BUILD)

format:
	@clang-format -i $$(git ls-files '*.c' '*.h' '*.cpp')

# Every C file as .clang-format wants it (the suite runs this first).
format-check:
	@command -v clang-format >/dev/null || scripts/deps.sh format
	@clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h' '*.cpp') && echo "format-check: clean"

clean:
	rm -rf $(BUILD) build-asan build-tsan
