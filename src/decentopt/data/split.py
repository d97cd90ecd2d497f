"""Dirichlet label split of a data set across agents (Hsu et al. 2019; Lin et al. 2021).

For every class k a vector ``p_k ~ Dirichlet(phi, ..., phi)`` over the n agents
is drawn and the samples of class k are dealt out in those proportions. Small
``phi`` gives each agent few classes (strong heterogeneity); large ``phi`` tends
to an i.i.d. split. Every sample goes to exactly one agent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DirichletSplit", "dirichlet_split"]


@dataclass(frozen=True)
class DirichletSplit:
    """Per-agent sample indices and the class histogram they produce."""

    indices: tuple[np.ndarray, ...]
    histogram: np.ndarray  # (n, classes)
    phi: float
    seed: int

    @property
    def sizes(self) -> np.ndarray:
        return self.histogram.sum(axis=1)

    def skew(self) -> float:
        """Mean total-variation distance between each agent's label mix and the global one."""
        global_mix = self.histogram.sum(0) / self.histogram.sum()
        local = self.histogram / self.sizes[:, None].clip(min=1)
        return float(0.5 * np.abs(local - global_mix).sum(1).mean())

    def report(self) -> str:
        """A plain-text table of each agent's class histogram."""
        classes = self.histogram.shape[1]
        head = "agent " + " ".join(f"{k:>5d}" for k in range(classes)) + "   total"
        lines = [f"Dirichlet(phi={self.phi:g}) split, seed {self.seed}", head]
        for i, row in enumerate(self.histogram):
            lines.append(f"{i:5d} " + " ".join(f"{v:5d}" for v in row) + f" {row.sum():7d}")
        lines.append(f"skew (mean total-variation distance to the global mix): {self.skew():.3f}")
        return "\n".join(lines)


def dirichlet_split(
    labels: np.ndarray,
    n: int,
    phi: float,
    *,
    seed: int = 0,
    min_share: int = 1,
    max_tries: int = 1000,
) -> DirichletSplit:
    """Split sample indices by label across ``n`` agents with Dirichlet(``phi``) proportions.

    Draws are repeated (with the next seeds of one generator) until every agent
    holds at least ``min_share`` samples, so each agent can form mini-batches.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError("labels must be a non-empty 1-D array of class indices")
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    if not phi > 0:
        raise ValueError(f"the Dirichlet concentration phi must be > 0; got {phi}")
    if min_share * n > labels.size:
        raise ValueError(
            f"cannot give {n} agents at least {min_share} samples each from {labels.size} samples"
        )
    classes = np.unique(labels)
    rng = np.random.default_rng(seed)
    by_class = [rng.permutation(np.flatnonzero(labels == k)) for k in classes]
    for _ in range(max_tries):
        chunks = []  # per class, its n chunks
        for idx in by_class:
            props = rng.dirichlet(np.full(n, phi))
            cuts = (np.cumsum(props) * len(idx)).astype(int)[:-1]
            chunks.append(np.split(idx, cuts))
        indices = tuple(np.sort(np.concatenate(p)) for p in zip(*chunks, strict=True))
        if min(len(ix) for ix in indices) >= min_share:
            hist = np.array([[np.sum(labels[ix] == k) for k in classes] for ix in indices])
            return DirichletSplit(indices, hist, float(phi), int(seed))
    raise ValueError(
        f"no Dirichlet(phi={phi}) split gave every one of {n} agents {min_share} samples in "
        f"{max_tries} draws; raise phi or lower min_share"
    )
