"""PNG figures of a run (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def heatmap(matrix: np.ndarray, path: Path, xlabel: str, ylabel: str, title: str) -> Path:
    """Save ``matrix`` (rows x columns) as a heatmap PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, cols = matrix.shape
    fig, ax = plt.subplots(figsize=(min(12, 2 + cols * 0.25), min(10, 2 + rows * 0.04)), dpi=100)
    im = ax.imshow(matrix, aspect="auto", interpolation="nearest", cmap="viridis")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
