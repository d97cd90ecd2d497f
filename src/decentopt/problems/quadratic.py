"""Least squares with heterogeneous local optima: the EDM paper's Figure 1 problem.

Agent ``i`` holds ``A_i`` (``p x d``) and a local optimum ``x_i*``; at every step it
observes fresh responses ``y_i = A_i x_i* + eps_i``, ``eps_i ~ N(0, sigma2 I_p)``, and
its stochastic loss is ``||y_i - A_i x||^2 / (2p)``. So

.. math::
    f_i(x) = \\tfrac12 (x - x_i^\\star)^\\top H_i (x - x_i^\\star) + \\text{const},
    \\qquad H_i = A_i^\\top A_i / p,

and the gradient noise is ``-A_i^T eps_i / p`` with covariance ``sigma2 H_i / p``.

Sampling note: the noise is drawn as ``sigma / sqrt(p) * C_i z`` with
``C_i C_i^T = H_i`` (Cholesky) and ``z ~ N(0, I_d)``, which has exactly the
distribution of ``A_i^T eps_i / p`` but needs ``d`` instead of ``p`` normal
draws; when some ``H_i`` is singular the ``p``-dimensional form is used.
Draws are made in float32 (torch's vectorised sampler, ~6x faster than
float64) and cast to the problem's dtype.

Scaling note: the paper writes ``f_i = 1/2 E||y - A x||^2``. With ``p = 20``
Gaussian rows that puts the local curvature near 60 and ``alpha = 0.05``
diverges for DSGD and ED, so the losses here are divided by ``p`` (curvature
near 1-3), which is what makes the paper's ``alpha = 0.05`` stable.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from decentopt._checks import as_count, as_real, check_problem_dtype
from decentopt.native.problems import quadratic_gradient
from decentopt.perf import one_thread
from decentopt.problems.base import ConvexProblem

__all__ = ["GRAM_BYTES", "Quadratic"]

#: Above this many bytes, :meth:`Quadratic.paper` forms the per-agent Gram matrices of one
#: repetition at a time (all at once is faster and what the paper's sizes use).
GRAM_BYTES = 64 << 20


def _checked(
    A: torch.Tensor, x_local: torch.Tensor, sigma2: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``Quadratic``'s inputs as ``(n, R, p, d)`` and ``(n, R, d)`` tensors of ``dtype`` and a
    float, or a ValueError that names what is wrong."""
    check_problem_dtype(dtype, "Quadratic")
    sigma2 = as_real(sigma2, "Quadratic: sigma2")
    A = torch.as_tensor(A, dtype=dtype)
    x_local = torch.as_tensor(x_local, dtype=dtype)
    if A.ndim == 3:
        A = A.unsqueeze(1)
    if x_local.ndim == 2:
        x_local = x_local.unsqueeze(1)
    if A.ndim != 4 or x_local.ndim != 3:
        raise ValueError(
            "Quadratic expects A of shape (n, p, d) or (n, R, p, d) and x_local of shape "
            f"(n, d) or (n, R, d); got A {tuple(A.shape)}, x_local {tuple(x_local.shape)}"
        )
    n, R, _, d = A.shape
    if x_local.shape != (n, R, d):
        raise ValueError(
            f"x_local must have shape (n, R, d) = {(n, R, d)} to match A {tuple(A.shape)}; "
            f"got {tuple(x_local.shape)}"
        )
    if not sigma2 >= 0:  # as_real refused a non-finite one
        raise ValueError(f"sigma2 must be a finite number >= 0; got {sigma2}")
    if not (torch.isfinite(A).all() and torch.isfinite(x_local).all()):
        raise ValueError("A and x_local must be finite")
    return A, x_local, sigma2


class Quadratic(ConvexProblem):
    """Heterogeneous least squares over ``n`` agents and ``R`` repetitions.

    Args:
        A: covariates, ``(n, p, d)`` for one repetition or ``(n, R, p, d)``.
        x_local: local optima ``x_i*``, ``(n, d)`` or ``(n, R, d)``.
        sigma2: variance of the response noise (0 gives exact gradients).
        dtype: floating type of every tensor (float64 by default).
        low_memory: compute gradients as ``A_i^T (A_i x) / p`` without the per-agent
            ``d x d`` Hessians (default: when ``p < d``, where they would be larger
            than ``A``); the noise then uses the ``p``-dimensional form.
    """

    def __init__(
        self,
        A: torch.Tensor,
        x_local: torch.Tensor,
        sigma2: float = 0.0,
        *,
        dtype: torch.dtype = torch.float64,
        low_memory: bool | None = None,
    ) -> None:
        A, x_local, sigma2 = _checked(A, x_local, sigma2, dtype)
        n, R, p, d = A.shape
        self.n = n
        self.repetitions = R
        self.p = p
        self.dim = d
        self.dtype = dtype
        self.sigma2 = sigma2
        self.A = A
        self.x_local = x_local
        # per-agent d x d Hessians cost more memory than A itself when p < d
        self.low_memory = p < d if low_memory is None else bool(low_memory)
        At = A.transpose(-1, -2)
        if self.low_memory:
            self.H = None
            self.b = (At @ (A @ x_local.unsqueeze(-1))).squeeze(-1) / p  # H_i x_i*
            self.H_mean = torch.einsum("nrpd,nrpe->rde", A, A) / (n * p)  # (R, d, d)
        else:
            self.H = At @ A / p  # (n, R, d, d)
            self.b = (self.H @ x_local.unsqueeze(-1)).squeeze(-1)  # H_i x_i*
            self.H_mean = self.H.mean(dim=0)  # (R, d, d), Hessian of f
        self.b_mean = self.b.mean(dim=0)
        gram = self.H if self.H is not None else A @ At / p
        with one_thread():  # many small factorisations: threads only wait (decentopt.perf)
            eig_mean = torch.linalg.eigvalsh(self.H_mean)
            if bool((eig_mean[:, 0] <= 1e-12 * eig_mean[:, -1].clamp_min(1e-300)).any()):
                raise ValueError(
                    "the global Hessian mean_i A_i^T A_i / p is singular, so x* is not unique; "
                    "use more rows in total (n * p >= d) or non-degenerate A"
                )
            self.x_star = torch.linalg.solve(self.H_mean, self.b_mean)  # (R, d)
            # (R,) max local smoothness: lambda_max(A_i^T A_i) = lambda_max(A_i A_i^T)
            self.L = torch.linalg.eigvalsh(gram)[..., -1].amax(dim=0)
            # noise = noise_factor @ z, z ~ N(0, I_k): covariance sigma2 H_i / p either way
            chol, info = (None, None) if self.H is None else torch.linalg.cholesky_ex(self.H)
        self.mu = eig_mean[:, 0]  # (R,) strong convexity of f
        # (R,) heterogeneity mean_i ||grad f_i(x*)||^2
        self.zeta2 = self.full_gradient(self.x_star.expand(n, -1, -1)).pow(2).sum(-1).mean(0)
        if chol is not None and p >= d and bool((info == 0).all()):
            self.noise_factor = chol * (self.sigma2 / p) ** 0.5
        else:
            self.noise_factor = At * (self.sigma2**0.5 / p)
        # k normals per agent and step, the columns of noise_factor
        self.noise_shape = (n, R, self.noise_factor.shape[-1]) if self.sigma2 > 0 else None
        # one batched product per step: [H_i | noise_factor_i] @ [x_i; z_i] - b_i
        self._fused = None
        if self.H is not None:
            parts = [self.H, self.noise_factor] if self.sigma2 > 0 else [self.H]
            self._fused = torch.cat(parts, dim=-1).reshape(n * R, d, -1)
            self._neg_b = -self.b.reshape(n * R, d, 1)

    # ------------------------------------------------------------------ builders
    @classmethod
    def paper(
        cls,
        n: int = 32,
        d: int = 10,
        p: int = 20,
        c: float | Sequence[float] = 1.0,
        sigma2: float = 0.05,
        repetitions: int = 20,
        seed: int = 0,
        *,
        dtype: torch.dtype = torch.float64,
    ) -> Quadratic:
        """The paper's Figure 1 generator.

        ``A_i`` entries ``N(0, 1)``; ``u_i ~ N(0, I_d)``;
        ``x* = (sum_i A_i^T A_i)^{-1} sum_i A_i^T A_i u_i``;
        ``x_i* = x* + (u_i - x*) / c``, so ``c`` scales the heterogeneity
        (``zeta^2`` is proportional to ``1/c^2``) while ``x*`` stays the optimum.
        Each repetition draws its own ``A`` and ``u``. A sequence of ``c`` values
        gives ``repetitions`` columns per value, in order, all sharing the same
        draws of ``A`` and ``u`` per repetition index.
        """
        check_problem_dtype(dtype, "Quadratic.paper")
        n, d, p, repetitions = (
            as_count(v, f"Quadratic.paper: {k}", minimum=1)
            for k, v in (("n", n), ("d", d), ("p", p), ("repetitions", repetitions))
        )
        cs = [as_real(v, "Quadratic.paper: c") for v in (c if isinstance(c, Sequence) else [c])]
        if not cs or any(not v > 0 for v in cs):
            raise ValueError(f"Quadratic.paper: the heterogeneity scale c must be > 0; got {c}")
        gen = torch.Generator().manual_seed(int(seed))
        A = torch.randn(n, repetitions, p, d, generator=gen, dtype=dtype)
        u = torch.randn(n, repetitions, d, generator=gen, dtype=dtype)
        # x* = (sum_i G_i)^-1 sum_i G_i u_i with G_i = A_i^T A_i; the per-agent (n, R, d, d)
        # products of all repetitions at once would dwarf A when p < d: above
        # GRAM_BYTES they are formed one repetition at a time
        fits = n * repetitions * d * d * A.element_size() <= GRAM_BYTES
        block = repetitions if fits else 1
        gram = torch.empty(repetitions, d, d, dtype=dtype)
        rhs = torch.empty(repetitions, d, dtype=dtype)
        for r in range(0, repetitions, block):
            G = A[:, r : r + block].transpose(-1, -2) @ A[:, r : r + block]  # (n, block, d, d)
            gram[r : r + block] = G.sum(0)
            rhs[r : r + block] = (G @ u[:, r : r + block].unsqueeze(-1)).squeeze(-1).sum(0)
        with one_thread():
            x_star = torch.linalg.solve(gram, rhs)
        x_local = torch.cat([x_star + (u - x_star) / v for v in cs], dim=1)
        return cls(A.repeat(1, len(cs), 1, 1), x_local, sigma2, dtype=dtype)

    # ----------------------------------------------------------------- interface
    def full_gradient(self, x: torch.Tensor, rows: slice = slice(None)) -> torch.Tensor:
        """Exact local gradients ``H_i x_i - H_i x_i*`` at a stack ``(n, R, d)``.

        With ``rows``, ``x`` holds only those agents (a distributed rank's share).
        """
        if self.H is None:
            A = self.A[rows]
            Ax = A @ x.unsqueeze(-1)
            return (A.transpose(-1, -2) @ Ax).squeeze(-1).div_(self.p).sub_(self.b[rows])
        return (self.H[rows] @ x.unsqueeze(-1)).squeeze(-1) - self.b[rows]

    def gradient(
        self, x: torch.Tensor, generator: torch.Generator, rows: slice = slice(None)
    ) -> torch.Tensor:
        """Stochastic gradients; with ``rows``, those agents' share of the same draw.

        The noise of all ``n`` agents is drawn either way, so a rank that passes
        ``rows`` sees exactly the noise the simulator gives those agents.
        """
        z = self.normals(generator)
        if self._fused is not None and rows == slice(None):
            v = x if z is None else torch.cat([x, z], dim=-1)
            return torch.baddbmm(self._neg_b, self._fused, v.flatten(0, 1)[..., None]).view(x.shape)
        grad = self.full_gradient(x, rows)
        if z is not None:
            grad = grad + (self.noise_factor[rows] @ z[rows].unsqueeze(-1)).squeeze(-1)
        return grad

    # ------------------------------------------------- many steps (driver.block)
    def noise_terms(self, z: torch.Tensor | None) -> torch.Tensor | None:
        """Each step's noise ``noise_factor_i z_i``, all steps in one batched product."""
        if z is None:
            return None
        return torch.einsum("nrdk,snrk->snrd", self.noise_factor, z.to(self.dtype))

    def gradient_from(self, x: torch.Tensor, term: torch.Tensor | None) -> torch.Tensor:
        """:meth:`gradient` with its noise given: on the CPU in one C pass over the Hessians
        (:func:`decentopt.native.problems.quadratic_gradient`, products summed in float64),
        elsewhere ``H_i x_i`` as one elementwise product and sum (cheaper than 640 tiny
        matrix products at the paper's sizes)."""
        if self.H is None:
            grad = self.full_gradient(x)
        else:
            native = quadratic_gradient(self.H, x, self.b, term)
            if native is not None:
                return native
            grad = (self.H * x.unsqueeze(-2)).sum(-1).sub_(self.b)
        return grad if term is None else grad.add_(term)

    def native_terms(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """``(H, F, b)``: ``(n, R, d, d)``, the noise factor ``(n, R, d, k)``, ``(n, R, d)``,
        for the native block kernel; None without per-agent Hessians (``low_memory``)."""
        return None if self.H is None else (self.H, self.noise_factor, self.b)

    def at_average(self, xbar: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        err = xbar - self.x_star
        grad_f = (self.H_mean @ xbar.unsqueeze(-1)).squeeze(-1) - self.b_mean
        return grad_f, 0.5 * (err.unsqueeze(-2) @ self.H_mean @ err.unsqueeze(-1)).reshape(-1)

    def __repr__(self) -> str:
        return (
            f"Quadratic(n={self.n}, R={self.repetitions}, p={self.p}, d={self.dim}, "
            f"sigma2={self.sigma2})"
        )
