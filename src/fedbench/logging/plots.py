"""PNG figures of a run (matplotlib, headless)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from fedbench.storage import write_file


def _figure(rows: int, cols: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = (min(12, max(5.0, 2 + cols * 0.25)), min(10, 2.5 + rows * 0.04))
    fig, ax = plt.subplots(figsize=size, dpi=100)
    return plt, fig, ax


def _finish(plt, fig, ax, path: Path, xlabel: str, ylabel: str, title: str) -> Path:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title("\n".join(textwrap.wrap(title, width=int(fig.get_figwidth() * 11))), fontsize=10)
    fig.tight_layout()
    try:
        write_file(path, lambda f: fig.savefig(f, format="png"))
    finally:
        plt.close(fig)
    return path


def heatmap(matrix: np.ndarray, path: Path, xlabel: str, ylabel: str, title: str, unit: str = "") -> Path:
    """Save ``matrix`` (rows x columns) as a heatmap PNG at ``path`` (title wrapped to the figure's width)."""
    plt, fig, ax = _figure(*matrix.shape)
    im = ax.imshow(matrix, aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(im, ax=ax, label=unit)
    return _finish(plt, fig, ax, path, xlabel, ylabel, title)


def categories(matrix: np.ndarray, path: Path, xlabel: str, ylabel: str, title: str, names: list) -> Path:
    """Save an integer matrix with values 0..len(names)-1 as an image with one discrete colour per category (light
    to dark, so it reads in black and white too) and a legend naming them."""
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    colours = ["#f2f2f2", "#a6cee3", "#1f78b4", "#08306b", "#e31a1c", "#33a02c"][: len(names)]
    plt, fig, ax = _figure(*matrix.shape)
    ax.imshow(matrix, aspect="auto", interpolation="nearest", cmap=ListedColormap(colours),
              norm=BoundaryNorm(np.arange(len(names) + 1) - 0.5, len(names)))
    ax.legend(handles=[Patch(facecolor=c, edgecolor="black", linewidth=0.5, label=n) for c, n in zip(colours, names)],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
    return _finish(plt, fig, ax, path, xlabel, ylabel, title)


def counts_over_time(hours: np.ndarray, counts: dict, path: Path, title: str) -> Path:
    """Per-round counts (``{"available": (R,), ...}``) against the simulated clock in hours, as steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5), dpi=100)
    for k, (name, values) in enumerate(counts.items()):
        ax.step(hours, values, where="post", linewidth=1.2, color=f"C{k}", label=name)
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    return _finish(plt, fig, ax, path, "simulated time (hours)", "clients", title)


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
    try:
        write_file(path, lambda f: fig.savefig(f, format="png"))
    finally:
        plt.close(fig)
    return path
