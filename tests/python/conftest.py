import numpy as np
import pytest

import lazytensor as lt


@pytest.fixture
def rng(request):
    """Fresh random inputs each run; the seed is in the test's failure report."""
    seed = np.random.SeedSequence().entropy % (2**32)
    request.node.user_properties.append(("seed", seed))
    print(f"seed {seed}")
    return np.random.default_rng(seed)


@pytest.fixture(autouse=True)
def settle():
    """Each test starts with nothing pending and no grad mode left off."""
    lt.set_grad_enabled(True)
    yield
    lt.mark_step()
    lt.wait_device_ops()
