"""Shared helpers for the tests."""

from pathlib import Path

import numpy as np

from fedbench.data.idx import write_idx
from fedbench.engine.simulation import Simulation


def make_sim(cfg, tmp_path: Path, root: Path = None) -> Simulation:
    return Simulation(cfg, tmp_path / "run", root or tmp_path / "data")


def write_fake_mnist(folder: Path, n_train=60, n_test=20, gz=True, seed=0) -> dict:
    """Write the four IDX files of an MNIST-layout dataset with random 28x28 images; return the arrays."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    for name, arr in arrays.items():
        write_idx(folder / (name + (".gz" if gz else "")), arr)
    return arrays
