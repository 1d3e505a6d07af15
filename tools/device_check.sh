#!/usr/bin/env bash
# The CUDA device's checks, on a machine with an NVIDIA GPU, in one call (meant to take under 7
# minutes on a built tree; each section has its own time limit):
#   tools/device_check.sh [LOG]        (default: device-check.log; BUILD=build/release)
# Everything goes to the one log (and to the terminal). Run from the repository root of a
# checkout built by the README's first command. Sections:
#   1. versions: the GPU and its driver, NVRTC, and what `lazytensor devices` says;
#   2. every kernel and routine of a bert-base step compiled for the GPU's own architecture;
#   3. the device-neutral test suites on cuda (CTest's Cuda.* tests);
#   4. AdamW over BERT-large's parameters (28 bytes a parameter in fp32): effective bandwidth
#      against the GPU's copy bandwidth (measured by PyTorch where it is installed), synchronous
#      uploads and compiles after the first step;
#   5. bf16 products on 8192^3 and BERT-large's shapes, ours against PyTorch's where installed;
#   6. one BERT training step on cuda and on cpu from the same seed: the losses compared.
# The script exits non-zero if a section failed; the figures are printed, not judged.
set -uo pipefail
LOG=${1:-device-check.log}
BUILD=${BUILD:-build/release}
LT="$BUILD/lazytensor"
exec > >(tee "$LOG") 2>&1
failed=0
section() { printf '\n== %s (%s)\n' "$1" "$(date +%T)"; }
# run SECONDS COMMAND...: a failure is reported and counted, and the script goes on.
run() {
  local limit=$1
  shift
  timeout "$limit" "$@"
  local status=$?
  if [ "$status" -ne 0 ]; then
    echo "FAILED (exit $status): $*"
    failed=1
  fi
  return "$status"
}
have_torch() { python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; }

section "versions"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || failed=1
cmake -S . -B "$BUILD" > /dev/null && cmake --build "$BUILD" -j"$(nproc)" > /dev/null || {
  echo "FAILED: the build"
  exit 1
}
run 60 "$LT" devices
if ! "$LT" devices --json /tmp/lt-devices.json > /dev/null ||
  ! python3 -c 'import json,sys; sys.exit(0 if any(d["name"] == "cuda" and d["available"] for d in json.load(open("/tmp/lt-devices.json"))) else 1)'; then
  echo "FAILED: cuda is not available here; the rest needs it"
  exit 1
fi
ARCH=sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
have_torch && python3 -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda)'

section "codegen: a bert-base step's kernels and every routine for $ARCH"
run 120 "$LT" codegen-check --device cuda --model base --arch "$ARCH" --json /tmp/lt-codegen.json

section "device-neutral suites on cuda"
run 300 ctest --test-dir "$BUILD" -R '^Cuda\.' -j4 --output-on-failure

section "AdamW over BERT-large's parameters"
run 120 env LT_DEVICE=cuda "$LT" adamw --model bert-large --steps 20 --json /tmp/lt-adamw.json
python3 - << 'EOF' || failed=1
import json
r = json.load(open("/tmp/lt-adamw.json"))
print(f"step {r['step_seconds_median'] * 1e3:.2f} ms, {r['bytes_per_param']} bytes a parameter, "
      f"effective {r['effective_gbs']:.0f} GB/s; synchronous uploads a step "
      f"{r['sync_transfers_per_step']}, compiles a step {r['compiles_per_step']}")
try:
    import torch
    n = 1 << 28  # 1 GiB of f32: a copy reads and writes 2 GiB
    x, y = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); y.copy_(x); end.record(); torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    copy_gbs = 8 * n / sorted(times)[len(times) // 2] / 1e9
    print(f"PyTorch device copy {copy_gbs:.0f} GB/s; AdamW at "
          f"{r['effective_gbs'] / copy_gbs:.0%} of it (target 80%)")
except Exception as e:  # no PyTorch with CUDA here
    print("no GPU copy bandwidth to compare with:", e)
EOF

section "bf16 products"
PYTHONPATH="$BUILD/python" run 150 python3 - << 'EOF'
import time
import lazytensor as lt
shapes = [(8192, 8192, 8192), (4096, 1024, 1024), (4096, 4096, 1024), (4096, 1024, 4096)]
lt.set_default_device("cuda")
ours = {}
for m, k, n in shapes:
    a = lt.randn(m, k).to(lt.bfloat16)
    b = lt.randn(k, n).to(lt.bfloat16)
    lt.mark_step()
    times = []
    for _ in range(5):
        c = a @ b
        start = time.perf_counter()
        lt.mark_step()
        lt.wait_device_ops()
        times.append(time.perf_counter() - start)
    ours[(m, k, n)] = 2 * m * k * n / sorted(times)[2] / 1e12
try:
    import torch
    theirs = {}
    for m, k, n in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        times = []
        for _ in range(5):
            torch.cuda.synchronize(); start = time.perf_counter()
            a @ b
            torch.cuda.synchronize(); times.append(time.perf_counter() - start)
        theirs[(m, k, n)] = 2 * m * k * n / sorted(times)[2] / 1e12
except Exception as e:
    theirs = {}
    print("no PyTorch products to compare with:", e)
for shape, tflops in ours.items():
    other = theirs.get(shape)
    ratio = f", PyTorch {other:.1f}, ratio {tflops / other:.2f} (target 0.85)" if other else ""
    print(f"{shape}: ours {tflops:.1f} TFLOP/s{ratio}")
EOF

section "one BERT training step, cuda against cpu"
for device in cpu cuda; do
  run 150 env LT_DEVICE=$device "$LT" train --model base --steps 1 --batch 8 --seq 128 \
    --json "/tmp/lt-train-$device.json" --quiet > /dev/null
done
python3 - << 'EOF' || failed=1
import json
cpu = json.load(open("/tmp/lt-train-cpu.json"))["losses"][0]
cuda = json.load(open("/tmp/lt-train-cuda.json"))["losses"][0]
loss = lambda v: v["loss"] if isinstance(v, dict) else v
a, b = loss(cpu), loss(cuda)
print("products on cuda:", json.load(open("/tmp/lt-train-cuda.json"))["matmul_library"])
print(f"loss cpu {a:.6f}, cuda {b:.6f}, relative difference {abs(a - b) / abs(a):.2e} (bound 1e-3)")
raise SystemExit(0 if abs(a - b) <= 1e-3 * abs(a) else 1)
EOF

section "done"
[ "$failed" -eq 0 ] && echo "every section ran" || echo "a section FAILED: see above"
exit "$failed"
