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


def test_derive_seeds_is_derive_seed_for_many_clients():
    """The vectorized SeedSequence hash equals numpy's, key by key (the batched runners' streams depend on it)."""
    from fedbench.rng import derive_seeds

    clients = np.array([0, 1, 7, 999, 65_535, 2**31 + 3, 2**32 - 2])
    for seed, purpose, r in [(0, "batches", 0), (2**40 + 5, "batches/1", 12_345), (7, "dropout", 2**32 - 2)]:
        assert derive_seeds(seed, purpose, r, clients).tolist() == [derive_seed(seed, purpose, r, int(c))
                                                                     for c in clients]
