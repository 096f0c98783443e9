# lwopt. On a fresh Debian 12 machine `make test` and `make demo` do all the set-up: install the
# missing Debian packages (scripts/deps.sh), configure and build with CMake, then run.
BUILD ?= build
ASAN_BUILD ?= build-asan
GPU_BUILD ?= build-gpu
# CUDA architectures for build-gpu; empty: CMake's default here ("80;90")
CUDA_ARCHITECTURES ?=
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
# No "Entering/Leaving directory" lines from the makes that CMake's build runs.
MAKEFLAGS += --no-print-directory

.PHONY: all deps build build-lib build-asan test test-gpu demo layout-demo bench install clean \
	format data

all: build

deps:
	@scripts/deps.sh

build: deps
	@[ -f $(BUILD)/CMakeCache.txt ] || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	@cmake --build $(BUILD) -j $(JOBS)

# What a recipe needs and no more (liblwopt.so and its Lua binding), printing one line, or the
# whole output when it fails (scripts/build-lib.sh); make build builds the tests and the CUDA
# library too.
build-lib: deps
	@scripts/build-lib.sh $(BUILD) $(JOBS)

# The C library and tests again with AddressSanitizer + UndefinedBehaviorSanitizer.
build-asan: deps
	@[ -f $(ASAN_BUILD)/CMakeCache.txt ] || cmake -S . -B $(ASAN_BUILD) \
		-DCMAKE_BUILD_TYPE=Debug -DLWOPT_SANITIZE=ON -DLWOPT_CUDA=OFF
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

# The default corpus: the King James Bible from Debian's bible-kjv, 4.3 MB of ASCII.
data: data/kjv.txt

data/kjv.txt: | deps
	@mkdir -p data
	@bible -l1000 "gen1:1-rev22:21" > $@.tmp && mv $@.tmp $@

# C tests (ctest), C tests under the sanitizers, busted specs under LuaJIT.
test: build build-asan data
	@scripts/test.sh $(BUILD) $(ASAN_BUILD)

# The GPU tests (ctest label gpu: tests/kernels/, tests/test_cuda*.c, tests/gpu/):
# build-gpu with the CUDA library required (LWOPT_CUDA=ON). Without a GPU they skip; on a GPU
# machine use scripts/gpu-run.sh, which also runs the GPU benchmarks.
test-gpu: deps
	@if [ ! -f $(GPU_BUILD)/CMakeCache.txt ] || [ -n "$(CUDA_ARCHITECTURES)" ]; then \
		cmake -S . -B $(GPU_BUILD) -DCMAKE_BUILD_TYPE=Release -DLWOPT_CUDA=ON \
			$(if $(CUDA_ARCHITECTURES),-DCMAKE_CUDA_ARCHITECTURES="$(CUDA_ARCHITECTURES)"); fi
	@cmake --build $(GPU_BUILD) -j $(JOBS)
	@ctest --test-dir $(GPU_BUILD) -L gpu --output-on-failure

# The main job: gpt_small on 2 ranks, with its log, loss curve and checkpoint in runs/; it builds
# only what it runs (build-lib).
demo: build-lib data
	@mkdir -p runs
	@OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 \
		-x OPENBLAS_NUM_THREADS=1 luajit recipes/gpt_small.lua --log runs/demo.jsonl \
		--ckpt-dir runs/demo --overwrite

layout-demo: build
	@bin/lwopt layout --arch gpt --n-layer 12 --n-embd 768 --n-head 12 --dp 8 --buckets

# The quick benchmarks; bench/optimizer_step.sh (several minutes) runs the MPI one.
bench: build
	@bin/lwopt run bench/layout.lua
	@$(BUILD)/bench_newton_schulz
	@bin/lwopt run bench/train_throughput.lua

install: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX)
	cmake --build $(BUILD) -j $(JOBS)
	cmake --install $(BUILD)

format:
	clang-format -i src/*.h src/core/*/*.[ch] src/core/device/cpu/*.c tests/*.c tests/*.h \
		tests/kernels/*.[ch]

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(GPU_BUILD)
