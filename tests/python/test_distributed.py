"""lt.distributed from Python: in a world of one the collectives return their input, averaging
keeps the gradients and bad arguments raise lt.Error naming the op; two ranks under mpirun
reduce, gather and average (the collectives' numerics in depth are tested in C++)."""
import numpy as np
import pytest

import lazytensor as lt


def setup_module():
    lt.distributed.init()


def test_a_world_of_one():
    assert lt.distributed.rank() == 0
    assert lt.distributed.world_size() == 1
    assert isinstance(lt.distributed.available(), bool)
    lt.distributed.barrier()


def test_collectives_return_their_input():
    x = np.random.default_rng().standard_normal((4, 3)).astype(np.float32)
    t = lt.tensor(x)
    for op in ("sum", "mean", "avg", "max"):
        np.testing.assert_array_equal(lt.distributed.all_reduce(t, op).numpy(), x)
        np.testing.assert_array_equal(lt.distributed.reduce_scatter(t, op).numpy(), x)
    np.testing.assert_array_equal(lt.distributed.all_gather(t).numpy(), x)
    np.testing.assert_array_equal(lt.distributed.broadcast(t, 0).numpy(), x)
    out = lt.distributed.all_reduce_coalesced([t, t * 2], "mean", 64)
    np.testing.assert_array_equal(out[1].numpy(), x * 2)


def test_average_gradients_keeps_a_single_process_gradient():
    w = lt.tensor(np.random.default_rng().standard_normal(5).astype(np.float32)).requires_grad_()
    (w * w).sum().backward()
    before = w.grad.numpy()
    lt.distributed.average_gradients([w])
    np.testing.assert_array_equal(w.grad.numpy(), before)


def test_bad_arguments_raise_lt_error():
    t = lt.ones(2)
    with pytest.raises(lt.Error, match="unknown reduce op 'prod'"):
        lt.distributed.all_reduce(t, "prod")
    with pytest.raises(lt.Error, match="broadcast: root 3"):
        lt.distributed.broadcast(t, 3)
    with pytest.raises(lt.Error, match="all_reduce: a mean needs a floating dtype"):
        lt.distributed.all_reduce(lt.tensor([1, 2]), "mean")


_TWO_RANKS = """
import sys
import lazytensor as lt
lt.distributed.init()
r = lt.distributed.rank()
s = lt.distributed.all_reduce(lt.ones(3) * (r + 1), "mean").tolist()
g = lt.distributed.all_gather(lt.ones(2) * r).tolist()
w = lt.ones(2).requires_grad_()
((w * (r + 1)).sum()).backward()
lt.distributed.average_gradients([w])
with open(f"{sys.argv[1]}/rank{r}.txt", "w") as out:  # ranks' stdout lines can interleave
    out.write(f"rank {r} of {lt.distributed.world_size()} {s} {g} {w.grad.tolist()}")
lt.distributed.finalize()
"""


def test_two_ranks_under_mpirun(tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    mpirun = shutil.which("mpirun")
    if mpirun is None or not lt.distributed.available():
        pytest.skip("needs Open MPI (mpirun, and lazytensor built with MPI)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run(
        [mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader",
         "--mca", "btl_vader_single_copy_mechanism", "none", "-np", "2",
         sys.executable, "-c", _TWO_RANKS, str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert lines == [
        "rank 0 of 2 [1.5, 1.5, 1.5] [0.0, 0.0, 1.0, 1.0] [1.5, 1.5]",
        "rank 1 of 2 [1.5, 1.5, 1.5] [0.0, 0.0, 1.0, 1.0] [1.5, 1.5]",
    ]
