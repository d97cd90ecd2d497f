"""The EDM paper's theory as code: step-size conditions, constants, rates and bounds.

Symbols: ``lam`` = lambda = ||W - 11^T/n||_2, ``beta`` the momentum, ``L`` the
smoothness constant, ``mu`` the PL constant, ``sigma2`` the gradient-noise
variance, ``n`` the number of agents, ``T`` the number of iterations.

Readings chosen where the paper's statement is inconsistent:

1. Theorem 1 defines ``zeta0^2 = (1/n) ||W (I - 11^T/n) grad f(X0)||_F`` with the
   norm **not squared**, yet calls it zeta0^2 and uses it in place of a squared
   norm (its proof bounds ``||P_I R0||_F^2 <= n beta^2 zeta0^2``). We use the
   squared norm: ``zeta0^2 = (1/n) ||W (I - 11^T/n) grad f(X0)||_F^2``.
2. Theorem 2's step-size condition ``alpha <= min{(1 - sqrt(lam))/10, (1 - beta)/5}``
   has no ``L`` (every other condition scales as 1/L); we read it as
   ``min{(1 - sqrt(lam))/(10 L), (1 - beta)/(5 L)}``, which equals the printed
   condition when ``L = 1``.
3. Theorem 2 bounds ``E f(xbar)`` by terms that vanish as ``t -> infinity``
   except the noise terms; its left side must be ``E f(xbar) - f*`` (its right
   side starts from ``f~(x0) = f(x0) - f*``), which is what
   :func:`pl_bound` evaluates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from decentopt.topology.schedule import TopologySchedule

__all__ = [
    "C0",
    "D1",
    "D2",
    "Bound",
    "nonconvex_bound",
    "nonconvex_step_size",
    "pl_bound",
    "pl_step_size",
    "rho1",
    "rho2",
    "topology_report",
    "zeta0_squared",
]


def _check(lam: float = 0.0, beta: float = 0.0, **positive: float) -> None:
    """Refuse a ``positive`` value not > 0, and ``lam`` or ``beta`` outside [0, 1)."""
    for name, value in positive.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0; got {value}")
    if not 0 <= lam < 1:
        raise ValueError(f"lambda must be in [0, 1) (a connected graph); got {lam}")
    if not 0 <= beta < 1:
        raise ValueError(f"beta must be in [0, 1); got {beta}")


def nonconvex_step_size(lam: float, beta: float, *, L: float = 1.0) -> float:
    """Theorem 1: ``alpha <= min{(1 - sqrt(lam)) / (4L), (1 - beta) / (4L)}``.

    Both step-size functions take ``(lam, beta, *, L)``; ``L`` is keyword-only
    so that no call can swap it with ``beta``.
    """
    _check(lam, beta, L=L)
    return min((1 - math.sqrt(lam)) / (4 * L), (1 - beta) / (4 * L))


def pl_step_size(lam: float, beta: float, *, L: float = 1.0) -> float:
    """Theorem 2: ``alpha <= min{(1 - sqrt(lam)) / (10 L), (1 - beta) / (5 L)}`` (reading 2)."""
    _check(lam, beta, L=L)
    return min((1 - math.sqrt(lam)) / (10 * L), (1 - beta) / (5 * L))


def C0(lam: float, beta: float) -> float:
    """Theorem 1: ``C0 = 24(1-b)^2/(1+sqrt(lam)) + 12 b^2 lam (1-sqrt(lam)) + 2 b^3 lam/(1-b)``."""
    _check(lam, beta)
    s = math.sqrt(lam)
    return (
        24 * (1 - beta) ** 2 / (1 + s)
        + 12 * beta**2 * lam * (1 - s)
        + 2 * beta**3 * lam / (1 - beta)
    )


def D1(lam: float, beta: float) -> float:
    """Theorem 2: ``D1``.

    ``D1 = 50 lam b^2/(3(1-b)) + 320(1-b)^2/(3(1+sqrt(lam))) + 160/3 lam b^2 (1-sqrt(lam))``.
    """
    _check(lam, beta)
    s = math.sqrt(lam)
    return (
        50 * lam * beta**2 / (3 * (1 - beta))
        + 320 * (1 - beta) ** 2 / (3 * (1 + s))
        + 160 / 3 * lam * beta**2 * (1 - s)
    )


def D2(lam: float, beta: float) -> float:
    """Theorem 2: ``D2 = 100/3 (5 lam b^2/(3(1-b)) + 4(1-b)^2 + 2 lam b^2 (1-lam))``."""
    _check(lam, beta)
    inner = (
        5 * lam * beta**2 / (3 * (1 - beta)) + 4 * (1 - beta) ** 2 + 2 * lam * beta**2 * (1 - lam)
    )
    return 100 / 3 * inner


def rho1(alpha: float, mu: float) -> float:
    """Theorem 2: ``rho1 = 1 - alpha mu``."""
    _check(alpha=alpha, mu=mu)
    return 1 - alpha * mu


def rho2(lam: float, beta: float) -> float:
    """Theorem 2: ``rho2 = 1 - min{(1 - sqrt(lam))/5, 2(1 - beta)/5}``."""
    _check(lam, beta)
    return 1 - min((1 - math.sqrt(lam)) / 5, 2 * (1 - beta) / 5)


def zeta0_squared(W: torch.Tensor | np.ndarray, grad0: torch.Tensor | np.ndarray) -> float:
    """``zeta0^2 = (1/n) ||W (I - 11^T/n) grad f(X0)||_F^2`` (reading 1: squared norm).

    ``grad0`` holds the agents' local gradients at the initial point, ``(n, d)``.
    """
    W = np.asarray(W, dtype=np.float64)
    G = np.asarray(grad0, dtype=np.float64).reshape(W.shape[0], -1)
    centred = G - G.mean(axis=0, keepdims=True)  # (I - 11^T/n) G
    return float(np.sum((W @ centred) ** 2) / W.shape[0])


@dataclass(frozen=True)
class Bound:
    """A bound's right-hand side, term by term."""

    terms: dict[str, float]
    step_size_ok: bool

    @property
    def total(self) -> float:
        return float(sum(self.terms.values()))


def nonconvex_bound(
    *,
    alpha: float,
    T: int,
    L: float,
    sigma2: float,
    n: int,
    lam: float,
    beta: float,
    f_gap0: float,
    zeta0_sq: float,
) -> Bound:
    """Theorem 1: bound on ``(1/T) sum_t (1/4 E||grad f(X_t)||^2 + E||grad f(xbar_t)||^2)``.

    .. math::
        \\frac{2}{\\alpha T}(f(x_0) - f^\\star) + \\frac{2\\alpha L\\sigma^2}{n}
        + \\frac{52\\alpha^2L^2\\lambda^2\\sigma^2}{1-\\lambda}
        + \\frac{8 C_0 \\alpha^2 L^2 \\zeta_0^2}{(1-\\sqrt\\lambda)^2 T}
    """
    _check(alpha=alpha, T=T, L=L, n=n)
    s = math.sqrt(lam)
    terms = {
        "initial gap": 2 * f_gap0 / (alpha * T),
        "noise (centralized)": 2 * alpha * L * sigma2 / n,
        "noise (network)": 52 * alpha**2 * L**2 * lam**2 * sigma2 / (1 - lam),
        "heterogeneity": 8 * C0(lam, beta) * alpha**2 * L**2 * zeta0_sq / ((1 - s) ** 2 * T),
    }
    return Bound(terms, alpha <= nonconvex_step_size(lam, beta, L=L))


def pl_bound(
    *,
    t: int,
    alpha: float,
    L: float,
    mu: float,
    sigma2: float,
    n: int,
    lam: float,
    beta: float,
    f_gap0: float,
    zeta0_sq: float,
) -> Bound:
    """Theorem 2: bound on ``E f(xbar_t) - f*`` (reading 3).

    .. math::
        \\Big(9\\tilde f(x_0)
            + \\frac{D_1\\alpha^3L^2\\zeta_0^2}{(1-\\sqrt\\lambda)^2}\\Big)\\rho_1^t
        + \\frac{D_2\\alpha^2L\\zeta_0^2}{1-\\lambda}\\rho_2^t
        + \\frac{6\\alpha L\\sigma^2}{n\\mu}
        + \\frac{169\\alpha^2L^2\\lambda^2\\sigma^2}{\\mu(1-\\lambda)}
    """
    _check(alpha=alpha, L=L, mu=mu, n=n)
    s = math.sqrt(lam)
    r1, r2 = rho1(alpha, mu), rho2(lam, beta)
    terms = {
        "initial gap": (9 * f_gap0 + D1(lam, beta) * alpha**3 * L**2 * zeta0_sq / (1 - s) ** 2)
        * r1**t,
        "heterogeneity": D2(lam, beta) * alpha**2 * L * zeta0_sq / (1 - lam) * r2**t,
        "noise (centralized)": 6 * alpha * L * sigma2 / (n * mu),
        "noise (network)": 169 * alpha**2 * L**2 * lam**2 * sigma2 / (mu * (1 - lam)),
    }
    return Bound(terms, alpha <= pl_step_size(lam, beta, L=L))


def topology_report(topo: Any, *, L: float = 1.0, beta: float = 0.9) -> list[tuple[str, str]]:
    """A graph's spectral quantities and the largest step sizes Theorems 1 and 2 allow.

    ``topo`` is a :class:`~decentopt.topology.Topology` (it has passed Assumption 1)
    or a :class:`~decentopt.topology.TopologySchedule`: then the rows are its period,
    the contraction of ``W_t`` over one period and the per-round rate ``lambda``
    (the period's contraction to the power ``1/period``), at which the theorems'
    step sizes are evaluated -- a heuristic: the theorems assume one fixed W.
    """
    symmetric = "symmetric" in topo.offers
    rows = [("topology", topo.name), ("n", str(topo.n))]
    how = f"(L={L:g}, beta={beta:g})"
    if isinstance(topo, TopologySchedule):
        per_round = ("P_t per round", _DIRECTED + " over a period")
        if symmetric:
            psd = ", W_t >= 0" if topo.psd else "; some W_t have a negative eigenvalue"
            per_round = ("Assumption 1 per round", "symmetric, doubly stochastic, w_ii > 0" + psd)
        rows += [
            ("period (rounds)", str(topo.period or "none: a fresh random W_t every round")),
            (
                "||prod W_t - 11^T/n|| over a period" + ("" if topo.period else " (64 rounds)"),
                f"{topo.period_contraction:.3g}"
                + (" (exact average)" if topo.period_contraction < 1e-12 else ""),
            ),
            ("lambda per round", f"{topo.lam:.6f}"),
            ("most peers per round", str(topo.max_degree)),
            per_round,
        ]
        lam = max(topo.lam, 1e-12)
        how = "at lambda per round (heuristic)"
    elif symmetric:
        lam = topo.lam
        deg = topo.degrees
        rows += [
            ("lambda = ||W - 11^T/n||", f"{topo.lam:.6f}"),
            ("1 - lambda", f"{topo.spectral_gap:.6g}"),
            ("lambda_min(W)", f"{topo.lam_min:.6g}"),
            ("degree (min / mean / max)", f"{deg.min()} / {deg.mean():.2f} / {deg.max()}"),
            ("Assumption 1", "holds (symmetric, doubly stochastic, w_ii > 0, W >= 0)"),
        ]
        if "tree" in topo.offers:
            rows.append(("tree", "yes: relaying (relaysgd) averages exactly over it"))
    else:  # the theorems assume a symmetric W: no step sizes
        deg = topo.degrees
        rows += [
            ("|lambda_2(P)| (mixing rate)", f"{topo.mixing_rate:.6f}"),
            ("1 - |lambda_2(P)|", f"{1 - topo.mixing_rate:.6g}"),
            ("messages sent (min / mean / max)", f"{deg.min()} / {deg.mean():.2f} / {deg.max()}"),
            ("P", _DIRECTED + ("; also row-stochastic" if topo.doubly_stochastic else "")),
        ]
    if not symmetric:
        return [*rows, ("Assumption 1", _NOT_SYMMETRIC)]
    bounds = (nonconvex_step_size, pl_step_size) if lam < 1 else ()  # none where lam >= 1
    return rows + [
        (f"max alpha, Theorem {k} {how}", f"{b(lam, beta, L=L):.4g}")
        for k, b in enumerate(bounds, 1)
    ]


#: What a directed graph satisfies, and what it does not.
_DIRECTED = "column-stochastic, p_ii > 0, strongly connected"
_NOT_SYMMETRIC = (
    "does not apply (not symmetric): compose a method with gossip='push_sum' (sgp, push_diging)"
)
