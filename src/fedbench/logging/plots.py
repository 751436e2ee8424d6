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


def probability_histogram(rounds: np.ndarray, probs: np.ndarray, path: Path, title: str, snapshots: int = 4) -> Path:
    """Histograms of N p_i (1 = the uniform probability) at up to ``snapshots`` recorded rounds, first to last."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = probs.shape[1]
    picks = sorted(set(np.linspace(0, len(rounds) - 1, min(snapshots, len(rounds))).round().astype(int).tolist()))
    scaled = probs[picks] * n
    top = max(float(scaled.max()), 1.0)
    bins = np.linspace(0.0, top * 1.0001, 31)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    styles = ["-", "--", "-.", ":"]
    for k, (i, row) in enumerate(zip(picks, scaled)):
        ax.hist(row, bins=bins, histtype="step", linewidth=1.5, linestyle=styles[k % len(styles)],
                label=f"round {int(rounds[i]) + 1}")
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("N x p_i (1 = uniform)")
    ax.set_ylabel("clients")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
