# ct — top-level entry points. `make run` and `make test` work on a fresh Debian 12 machine:
# they install missing packages, configure and build with CMake into build/, then run.
BUILD     ?= build
TYPE      ?= RelWithDebInfo
CMAKE_ARGS ?=
JOBS      ?= $(shell nproc)
NAME      ?=
PREFIX    ?= /usr/local
FUZZ_SECONDS ?= 300
FUZZ_TARGETS = fuzz_safetensors fuzz_yaml_config fuzz_envelope fuzz_zmtp fuzz_node fuzz_auth \
               fuzz_dataport

.PHONY: all deps build run test test-slow bench sanitize tsan fuzz install format clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(TYPE) $(CMAKE_ARGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job: trains on Fashion-MNIST on an embedded local cluster.
run: build
	scripts/run-main.sh $(BUILD)

# Every test (test-slow: only those labelled slow); tests clean up every process they start.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

test-slow: build
	cd $(BUILD) && ctest --output-on-failure -L slow --timeout 1800

# Same suite under AddressSanitizer + UndefinedBehaviorSanitizer, in build-sanitize/.
sanitize:
	@scripts/install-deps.sh
	cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DCT_SANITIZE=ON $(CMAKE_ARGS)
	cmake --build build-sanitize -j $(JOBS)
	cd build-sanitize && ctest --output-on-failure -j $(JOBS) -LE slow --timeout 900

# The runtime, object store, collective and security tests under ThreadSanitizer (gcc), in
# build-tsan/. The collective tests carry no label, so the four are picked by name (security_
# because the authentication runs threads: the ZAP handler, handshakes in connection threads). setarch -R turns off
# ASLR, which on newer kernels makes TSan fail with "unexpected memory mapping"; die_after_fork=0
# lets the tests' forked nodes start threads (they fork a process that already has some);
# tests/tsan.supp holds the suppressions for uninstrumented libraries, none for ct's own code.
TSAN_TESTS = ^(runtime|objectstore|collective|security)_
TSAN_RUN_OPTIONS = suppressions=$(CURDIR)/tests/tsan.supp die_after_fork=0 $(TSAN_OPTIONS)
tsan:
	@scripts/install-deps.sh
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DCT_TSAN=ON $(CMAKE_ARGS)
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS="$(TSAN_RUN_OPTIONS)" setarch $$(uname -m) -R \
		ctest -R '$(TSAN_TESTS)' --output-on-failure -j $(JOBS) --timeout 900

# libFuzzer targets (fuzz/) built with clang in build-fuzz/, each run FUZZ_SECONDS (default 300;
# make test runs each for 60 s, fuzz/CMakeLists.txt) on a copy of its seed corpus; fails when one
# crashes (the input is left in build-fuzz/fuzz-crashes/).
fuzz:
	@scripts/install-deps.sh
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCT_FUZZ=ON \
		-DCT_WITH_CUDA=OFF $(CMAKE_ARGS)
	cmake --build build-fuzz -j $(JOBS) --target $(FUZZ_TARGETS)
	scripts/run-fuzz.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Benchmarks against the reference systems; `make bench NAME=x` runs bench/x only.
bench: build
	@scripts/install-deps.sh bench
	scripts/run-bench.sh $(BUILD) $(NAME)

# libct.so, the public headers, ct.pc and ct-head/ct-node/ctup under PREFIX; applications then
# build with `cc app.c $$(pkg-config --cflags --libs ct)`.
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD) build-sanitize build-tsan build-fuzz
