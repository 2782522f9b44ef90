# vllm.c: front for the README commands. The build itself is CMake (build/).
#   make run    installs missing Debian packages, builds, generates a story with the bundled model
#   make test   builds and runs every test (ctest)
#   make install PREFIX=/usr/local   builds, then installs (cmake --install)
BUILD ?= build
JOBS ?= $(shell nproc)
DEPS = build-essential cmake pkg-config libjansson-dev libonig-dev libutf8proc-dev libmicrohttpd-dev libcurl4-openssl-dev
SUDO = $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build deps run test test-asan test-tsan test-clang fuzz install clean

all: build

deps:
	@missing=""; for p in $(DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# bin/vllmc, lib/libvllmc.so* and libvllmc.a, include/vllm.h, lib/pkgconfig/vllmc.pc and the Python package
# (lib/python3/dist-packages/vllmc) under PREFIX
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

run: deps build
	@printf 'Once upon a time'
	@$(BUILD)/vllmc generate --model models/stories260K --prompt "Once upon a time" --max-tokens 256 --temperature 0.8 --seed 42 --stats

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# AddressSanitizer + UndefinedBehaviorSanitizer build of the whole suite. The sanitizer and clang builds
# leave the CUDA backend out (-DVLLM_CUDA=OFF): its kernels cannot run on a machine without a GPU, and
# `make test` already compiles them (6 minutes of nvcc per build on 2 cores)
test-asan:
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DVLLM_SANITIZE=ON -DVLLM_CUDA=OFF >/dev/null
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS)

# ThreadSanitizer on the multi-threaded parts: the CPU thread pool, ops, the engine, the hub downloads, the server (its
# tests start the TSan-built `vllmc serve`, which inherits TSAN_OPTIONS: a race ends it with exit 66
# and fails the test) and the CLI (generate, bench serve against a server)
# (model_test_parity, 7 minutes under TSan, is left to the ASan build: it runs the fixtures' families through
# the same thread pool and ops the other model_ and engine_ tests put under TSan)
test-tsan:
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DVLLM_TSAN=ON -DVLLM_CUDA=OFF >/dev/null
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) -R 'cpu_|engine_|model_|sample_|server_|cli_|hub_|dist_' \
	  -E 'model_test_parity'

# libFuzzer targets (tests/fuzz/fuzz_*.c), FUZZ_SECONDS each, one after the other; stops at the first
# crash. Each starts from its seed corpus tests/fuzz/corpus/<target> (copied into
# build-fuzz/corpus-<target>, where what libFuzzer finds accumulates) with its dictionary
# tests/fuzz/<target>.dict; a crash leaves its input in build-fuzz/<target>-crash-*.
# (tests/fuzz/make_corpus.py rewrites the seeds and dictionaries.)
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = $(notdir $(basename $(wildcard tests/fuzz/fuzz_*.c)))
fuzz:
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DVLLM_FUZZ=ON >/dev/null
	cmake --build build-fuzz -j $(JOBS) --target $(FUZZ_TARGETS)
	for f in $(FUZZ_TARGETS); do \
	  mkdir -p build-fuzz/corpus-$$f && \
	  if [ -d tests/fuzz/corpus/$$f ]; then cp tests/fuzz/corpus/$$f/* build-fuzz/corpus-$$f/; fi && \
	  dict=""; if [ -f tests/fuzz/$$f.dict ]; then dict=-dict=tests/fuzz/$$f.dict; fi; \
	  echo "== $$f: $(FUZZ_SECONDS) s"; \
	  build-fuzz/$$f -max_total_time=$(FUZZ_SECONDS) -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 $$dict \
	    -artifact_prefix=build-fuzz/$$f- build-fuzz/corpus-$$f || exit 1; \
	done

# clang must build without warnings too
test-clang:
	CC=clang cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=OFF >/dev/null
	cmake --build build-clang -j $(JOBS)

clean:
	rm -rf $(BUILD) build-asan build-tsan build-clang build-fuzz
