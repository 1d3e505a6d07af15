"""The runtime from Python: scalar policies, metrics, memory, threads and the GIL."""
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import lazytensor as lt


def test_scalar_policies_and_metrics(rng):
    p = lt.tensor(rng.standard_normal(1000).astype(np.float32))
    lt.mark_step()
    for policy, uploads in [("argument", 0), ("uncached", 3)]:
        lt.set_scalar_policy(policy)
        try:
            lt.metrics.reset()
            for step in range(1, 4):
                p.mul_(1 - 0.01 / step).add_(0.001 * step)
                lt.mark_step()
            lt.wait_device_ops()
            assert lt.scalar_policy() == policy
            # Under "uncached" each new non-trivial scalar is a synchronous upload.
            synced = lt.metrics.counter_value("TransferToDeviceSync")
            assert (synced >= uploads) if uploads else synced == 0
        finally:
            lt.set_scalar_policy("argument")
    assert "ExecuteComputation" in lt.metrics.report()
    assert "ExecuteComputation" in lt.metrics.counter_names()
    assert isinstance(lt.last_recompile_reason(), str)
    stats = lt.last_step_stats()
    assert stats["launches"] >= 1 and stats["outputs"] >= 1


def test_memory_stays_flat_over_ten_thousand_steps():
    x = lt.ones(256)
    lt.mark_step()
    lt.wait_device_ops()
    start_bytes = lt.device_memory_stats()["bytes_in_use"]
    start_nodes = lt.live_ir_nodes()
    for _ in range(10_000):
        y = x * 2.0 + 1.0
        lt.mark_step()
    del y
    lt.wait_device_ops()
    assert lt.device_memory_stats()["bytes_in_use"] == start_bytes
    assert lt.live_ir_nodes() <= start_nodes + 4


def test_waiting_releases_the_gil():
    """A Python thread keeps running while the main thread waits for the device."""
    ticks = []
    stop = threading.Event()

    def loader():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    a = lt.ones(512, 512)
    lt.mark_step()
    thread = threading.Thread(target=loader)
    thread.start()
    try:
        t = a
        for _ in range(200):
            t = (t @ a) * (1.0 / 512)
        lt.mark_step()
        start = time.perf_counter()
        t.sum().item()
        waited = time.perf_counter() - start
        during = [s for s in ticks if s >= start]
    finally:
        stop.set()
        thread.join()
    # 200 products of 512 x 512 matrices take tenths of a second: the loader ticks meanwhile.
    # Held, the GIL would let it tick at most once (between `start` and the wait); a busy
    # machine may starve it, so more than one tick is all that is asked.
    if waited > 0.05:
        assert len(during) >= 2, f"the loader ran {len(during)} times in {waited:.3f} s"


def test_threads_trace_their_own_values(rng):
    arrays = [rng.standard_normal(100).astype(np.float32) for _ in range(4)]
    results = [None] * 4

    def work(k):
        t = lt.tensor(arrays[k])
        for _ in range(20):
            t = t * 1.5 - 0.25
        results[k] = t.numpy()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # Each op rounds to float32, as NumPy's float32 arithmetic in the same order does, so the
    # values must be equal: 20 steps of x * 1.5 multiply any other rounding by up to 1.5^20.
    for k in range(4):
        want = arrays[k].copy()
        for _ in range(20):
            want = want * np.float32(1.5) - np.float32(0.25)
        np.testing.assert_array_equal(results[k], want)


def test_matmul_isa_and_kernel_isa_name_instructions():
    known = {"amx", "avx512_bf16", "avx512", "avx2", "sse4.1"}
    for dtype in (lt.float32, lt.float64, lt.bfloat16):
        assert lt.matmul_isa(dtype) in known
    assert lt.matmul_isa(lt.float32) not in ("amx", "avx512_bf16")  # bf16 instructions
    assert lt.kernel_isa() in {"avx512", "avx2", "sse2", "interpreter"}


def test_matmul_library_names_the_library_of_each_dtype():
    for dtype in (lt.float32, lt.float64, lt.bfloat16):
        name = lt.matmul_library(dtype)
        assert name.startswith(("oneDNN ", "OpenBLAS ")), name
    assert lt.matmul_library(lt.float64).startswith("OpenBLAS ")  # oneDNN has no f64 matmul
    bf16 = lt.matmul_library(lt.bfloat16)
    assert bf16.startswith("oneDNN ") != bf16.endswith("(bf16 operands widened to f32)")
    with pytest.raises(lt.Error, match="matmul"):
        lt.matmul_library(lt.int64)


def _spin_count_after_import(**env):
    """libgomp's report (OMP_DISPLAY_ENV) of the spin it read, in a process importing the package."""
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    environ.update(env, OMP_DISPLAY_ENV="verbose")
    result = subprocess.run([sys.executable, "-c", "import lazytensor"], capture_output=True,
                            text=True, timeout=300, env=environ)
    assert result.returncode == 0, result.stderr
    reports = re.findall(r"GOMP_SPINCOUNT = '(\d+)'", result.stdout + result.stderr)
    assert reports, result.stdout + result.stderr
    return reports[-1]


def test_the_package_keeps_openmp_workers_awake_between_launches_unless_the_user_chose():
    assert _spin_count_after_import() == "30000"
    assert _spin_count_after_import(OMP_WAIT_POLICY="PASSIVE") == "0"
    assert _spin_count_after_import(GOMP_SPINCOUNT="1234") == "1234"
