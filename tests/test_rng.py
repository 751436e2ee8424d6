import random

import numpy as np
import torch

from fedbench.rng import derive_seed, numpy_rng, torch_rng


def test_streams_are_keyed_and_reproducible():
    assert derive_seed(0, "a", 1, 2) == derive_seed(0, "a", 1, 2)
    keys = {derive_seed(s, p, r, c) for s in (0, 1) for p in ("a", "b") for r in (None, 0, 1) for c in (None, 0, 1)}
    assert len(keys) == 2 * 2 * 3 * 3
    a = numpy_rng(3, "x", 5).random(4)
    assert np.array_equal(a, numpy_rng(3, "x", 5).random(4))
    t1 = torch.randperm(100, generator=torch_rng(3, "x", 5))
    assert torch.equal(t1, torch.randperm(100, generator=torch_rng(3, "x", 5)))
    assert not torch.equal(t1, torch.randperm(100, generator=torch_rng(3, "x", 6)))


def test_global_state_untouched():
    random.seed(123)
    np.random.seed(123)
    before = (random.random(), np.random.random())
    random.seed(123)
    np.random.seed(123)
    numpy_rng(0, "p", 1, 2).random(10)
    torch_rng(0, "p").initial_seed()
    assert (random.random(), np.random.random()) == before
