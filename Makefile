# ct — top-level entry points. `make run` and `make test` work on a fresh Debian 12 machine:
# they install missing packages, configure and build with CMake into build/, then run.
BUILD     ?= build
TYPE      ?= RelWithDebInfo
CMAKE_ARGS ?=
JOBS      ?= $(shell nproc)
NAME      ?=
PREFIX    ?= /usr/local

.PHONY: all deps build run test test-slow bench sanitize install format clean

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
	rm -rf $(BUILD) build-sanitize
