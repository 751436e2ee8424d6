"""Counter-based randomness.

Every random stream is derived from ``(seed, purpose, round, client)`` through numpy's ``SeedSequence``
(a hash-based entropy mixer), so no stream depends on how many numbers another stream consumed, nothing
touches the global ``random`` / ``np.random`` / ``torch`` state, and any round can be replayed on its own.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

_NO_INDEX = 2**32 - 1  # stands for "no round" / "no client" in a key


def _purpose_code(purpose: str) -> int:
    return zlib.crc32(purpose.encode("utf-8"))


def derive_seed(seed: int, purpose: str, round: int | None = None, client: int | None = None) -> int:
    """A 63-bit seed for the stream ``(seed, purpose, round, client)``."""
    key = [
        int(seed) & 0xFFFFFFFF,
        _purpose_code(purpose),
        _NO_INDEX if round is None else int(round),
        _NO_INDEX if client is None else int(client),
    ]
    state = np.random.SeedSequence(key).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def numpy_rng(seed: int, purpose: str, round: int | None = None, client: int | None = None) -> np.random.Generator:
    """A numpy Generator (PCG64) for the stream ``(seed, purpose, round, client)``."""
    return np.random.Generator(np.random.PCG64(derive_seed(seed, purpose, round, client)))


def torch_rng(
    seed: int, purpose: str, round: int | None = None, client: int | None = None, device: str | torch.device = "cpu"
) -> torch.Generator:
    """A torch Generator for the stream ``(seed, purpose, round, client)``."""
    g = torch.Generator(device=device)
    g.manual_seed(derive_seed(seed, purpose, round, client))
    return g
