"""Draw layouts to PNG files (needs matplotlib: ``pip install 'nbwgmma[plot]'``).

* :func:`plot_acc_layout`: which thread and register hold each element of a wgmma
  accumulator tile (from :func:`nbwgmma.layout.fragment.acc_coords`).
* :func:`plot_swizzle`: where each 16-byte chunk of a swizzled tile lands
  (from :func:`nbwgmma.layout.descriptor.swizzle_addr`).

    python -m nbwgmma layout acc --n 16 acc.png
    python -m nbwgmma layout swizzle --swizzle 128B sw.png
"""

from __future__ import annotations

import numpy as np

from .layout.descriptor import SWIZZLE_BYTES, swizzle_addr
from .layout.fragment import acc_coords

__all__ = ["plot_acc_layout", "plot_swizzle"]


def _figure(rows, cols, scale):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4, cols * scale), max(3, rows * scale * 0.55)))
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.tick_params(labelsize=6)
    return fig, ax, plt


def plot_acc_layout(path, kind: str = "f32.bf16.bf16", n: int = 16, rows: int = 16):
    """Draw the first ``rows`` rows of the m64nN accumulator: each cell says ``T<thread>``
    and ``v<value>``, coloured by warp."""
    coords = acc_coords(kind, n)  # [128, N/2, 2]
    owner = np.zeros((64, n), int)
    value = np.zeros((64, n), int)
    for t in range(128):
        for i in range(coords.shape[1]):
            r, c = coords[t, i]
            owner[r, c], value[r, c] = t, i
    fig, ax, plt = _figure(rows, n, 0.75)
    colors = plt.get_cmap("tab20")
    for r in range(rows):
        for c in range(n):
            t = owner[r, c]
            ax.add_patch(plt.Rectangle((c, r), 1, 1, color=colors((t // 32) * 4 + (t % 4)), alpha=0.6))
            ax.text(c + 0.5, r + 0.5, f"T{t}\nv{value[r, c]}", ha="center", va="center", fontsize=5)
    ax.set_title(f"{kind} m64n{n} accumulator: thread T and value index v (colour: warp, lane % 4)")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return owner, value


def plot_swizzle(path, swizzle: str = "128B", rows: int = 8):
    """Draw ``rows`` rows of a swizzled tile as 16-byte chunks: each physical slot says which
    logical chunk (row, chunk) the swizzle put there."""
    span = SWIZZLE_BYTES[swizzle]
    chunks = max(span // 16, 1)
    r, c = np.meshgrid(np.arange(rows), np.arange(chunks), indexing="ij")
    logical = r * span + c * 16
    phys = swizzle_addr(logical, swizzle)
    fig, ax, plt = _figure(rows, chunks, 0.9)
    colors = plt.get_cmap("tab10")
    for rr in range(rows):
        for cc in range(chunks):
            p = phys[rr, cc]
            pr, pc = p // span, (p % span) // 16
            ax.add_patch(plt.Rectangle((pc, pr), 1, 1, color=colors(cc % 10), alpha=0.6))
            ax.text(pc + 0.5, pr + 0.5, f"({rr},{cc})", ha="center", va="center", fontsize=7)
    ax.set_title(f"{swizzle} swizzle: logical 16-byte chunk (row, chunk) at its physical slot")
    ax.set_xlabel("physical 16-byte chunk in the row")
    ax.set_ylabel("row")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return phys
