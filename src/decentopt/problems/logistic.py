"""l2-regularised logistic regression: the EDM paper's Figure 2 problem.

Agent ``i`` holds ``m`` samples ``(u_ij, v_ij)`` drawn from its own logistic model
``P(v = 1 | u) = 1 / (1 + exp(-x_i^T u))`` with ``x_i = x_0 + eps_i``,
``eps_i ~ N(0, sigma_h2 I)`` and ``x_0 = (1, ..., 1)``; so ``sigma_h2`` sets the
heterogeneity. Its loss is

.. math::
    f_i(x) = \\frac1m \\sum_{j=1}^m \\log\\big(1 + e^{-v_{ij} x^\\top u_{ij}}\\big)
             + \\frac{\\mu}{2} \\|x\\|^2 .

Stochastic gradients are the full local gradients plus ``N(0, sigma_s2 I_d)``
noise, as in the paper. Per agent ``i`` and repetition, the data term is

.. math::
    z_j = v_{ij} u_{ij}^\\top x_i, \\qquad
    \\nabla f_i(x_i) - \\mu x_i = -\\frac1m \\sum_{j=1}^m \\sigma(-z_j)\\, v_{ij} u_{ij} ;

on the CPU the gradient computes it with the native C kernel
(:mod:`decentopt.native.problems`) in one pass over the data: each agent's and
repetition's samples are read once, a block at a time, for ``z_j``, the weight
``sigma(-z_j)`` and the sum, in float64 in a fixed order whatever the thread count.
Heterogeneity levels that share their samples (:meth:`Logistic.paper`'s: only the labels
differ) are stored once and read once per step for all levels.
Without the library (or with ``DECENTOPT_NATIVE=0``, or on a GPU) torch computes
the same sum in two batched products over the data, in the data's dtype. With
``compute_dtype=torch.float32`` the per-step gradients read a float32 copy of the
data (half the memory traffic); the C kernel still sums in float64, torch in
float32, so the two differ by float32 rounding. The optimum and every metric are
always computed from the float64 data (the exact gradient by the same kernel). The
minimiser ``x*`` of ``f = mean_i f_i`` is computed by Newton's method to machine
precision, so ``f(xbar) - f*`` and ``||grad f(xbar)||^2`` are exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from decentopt._checks import as_count, as_real, check_problem_dtype
from decentopt.native.problems import logistic_data_term, logistic_term_and_loss
from decentopt.perf import one_thread
from decentopt.problems.base import ConvexProblem

__all__ = ["Logistic"]


class Logistic(ConvexProblem):
    """Heterogeneous l2-regularised logistic regression over ``n`` agents, ``R`` repetitions.

    Args:
        U: covariates ``(n, S, m, d)``, shared by the columns ``s, s + S, s + 2 S, ...``
            of ``v`` (``S = R``: each column its own).
        v: labels in {-1, +1}, ``(n, R, m)``, ``R`` a multiple of ``S``.
        mu: l2 penalty (> 0, makes every ``f_i`` mu-strongly convex).
        sigma_s2: variance of the additive gradient noise.
        compute_dtype: dtype of the data read by :meth:`gradient` (default: ``dtype``).
    """

    def __init__(
        self,
        U: torch.Tensor,
        v: torch.Tensor,
        mu: float,
        sigma_s2: float = 0.0,
        *,
        dtype: torch.dtype = torch.float64,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        check_problem_dtype(dtype, "Logistic")
        if compute_dtype is not None:
            check_problem_dtype(compute_dtype, "Logistic (compute_dtype)")
        mu = as_real(mu, "Logistic: mu")
        sigma_s2 = as_real(sigma_s2, "Logistic: sigma_s2")
        U = torch.as_tensor(U, dtype=dtype)
        v = torch.as_tensor(v, dtype=dtype)
        if U.ndim == 3:
            U, v = U.unsqueeze(1), v.unsqueeze(1)
        if (
            U.ndim != 4
            or v.ndim != 3
            or v.shape[::2] != U.shape[:3:2]
            or U.shape[1] == 0
            or v.shape[1] % U.shape[1]
        ):
            raise ValueError(
                "Logistic expects U of shape (n, S, m, d) and v of shape (n, R, m), R a "
                f"multiple of S; got U {tuple(U.shape)}, v {tuple(v.shape)}"
            )
        if not bool(((v == 1) | (v == -1)).all()):
            raise ValueError("labels v must be -1 or +1")
        if not mu > 0:
            raise ValueError(f"the l2 penalty mu must be > 0; got {mu}")
        if not sigma_s2 >= 0:
            raise ValueError(f"sigma_s2 must be >= 0; got {sigma_s2}")
        self.n, self.repetitions = v.shape[:2]
        self.m, self.dim = U.shape[2:]
        self.dtype = dtype
        self.mu = float(mu)
        self.sigma_s2 = float(sigma_s2)
        self.noise_shape = (self.n, self.repetitions, self.dim) if sigma_s2 > 0 else None
        self.v = v
        self._U = U.contiguous()
        self.compute_dtype = compute_dtype or dtype
        self._U_fast = self._U.to(self.compute_dtype)
        self._v_fast = v.to(self.compute_dtype)
        self.x_star = self._solve()
        self.f_star = self.objective(self.x_star)
        self.zeta2 = self.full_gradient(self.x_star.expand(self.n, -1, -1)).pow(2).sum(-1).mean(0)
        # smoothness of the local losses: lambda_max(U^T U) / (4 m) + mu (v^2 = 1)
        gram = self._U.transpose(-1, -2) @ self._U / self.m
        with one_thread():  # many small factorisations: threads only wait (decentopt.perf)
            L = torch.linalg.eigvalsh(gram)[..., -1].amax(0) / 4 + self.mu
        self.L = L.repeat(self.repetitions // U.shape[1])

    @classmethod
    def paper(
        cls,
        n: int = 32,
        d: int = 20,
        m: int = 2000,
        sigma_h2: float | Sequence[float] = 1.0,
        mu: float = 0.01,
        sigma_s2: float = 0.01,
        repetitions: int = 20,
        seed: int = 0,
        *,
        dtype: torch.dtype = torch.float64,
        compute_dtype: torch.dtype | None = None,
    ) -> Logistic:
        """The paper's Figure 2 generator (``x_0 = 1``, ``u_ij ~ N(0, I_d)``, ``z_ij ~ U(0, 1)``).

        A sequence of ``sigma_h2`` values gives ``repetitions`` columns per
        value, in order; the same ``u``, ``z`` and direction of ``eps_i`` are
        used for every value (only the scale ``sqrt(sigma_h2)`` changes).
        """
        check_problem_dtype(dtype, "Logistic.paper")
        levels = sigma_h2 if isinstance(sigma_h2, Sequence) else [sigma_h2]
        hs = [as_real(h, "Logistic.paper: sigma_h2") for h in levels]
        if not hs or any(h < 0 for h in hs):
            raise ValueError(f"Logistic.paper: sigma_h2 must be >= 0; got {sigma_h2}")
        n, d, m, repetitions = (
            as_count(v, f"Logistic.paper: {k}", minimum=1)
            for k, v in (("n", n), ("d", d), ("m", m), ("repetitions", repetitions))
        )
        gen = torch.Generator().manual_seed(int(seed))
        U = torch.randn(n, repetitions, m, d, generator=gen, dtype=dtype)
        eps = torch.randn(n, repetitions, d, generator=gen, dtype=dtype)
        z = torch.rand(n, repetitions, m, generator=gen, dtype=dtype)
        vs = []
        for h in hs:
            prob_one = torch.sigmoid((U @ (1.0 + h**0.5 * eps).unsqueeze(-1)).squeeze(-1))
            vs.append(torch.where(z <= prob_one, 1.0, -1.0).to(dtype))
        return cls(U, torch.cat(vs, 1), mu, sigma_s2, dtype=dtype, compute_dtype=compute_dtype)

    # ----------------------------------------------------------------- internals
    def _levels(self, x: torch.Tensor) -> list[torch.Tensor]:
        """A stack ``(n, R, ...)`` split into the column blocks that share samples."""
        return list(x.split(self._U.shape[1], dim=1))

    def _margins(
        self, x: torch.Tensor, U: torch.Tensor | None = None, v: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``v_ij u_ij^T x_i`` for a stack ``(n, R, d)`` -> ``(n, R, m)`` (float64 data, or
        the given ``U`` and ``v``)."""
        U, v = (self._U, self.v) if U is None or v is None else (U, v)
        # every level's points as columns of one product: the samples read once, not once
        # per level (Figure 2's objective by torch: 0.22 s -> 0.15 s at one thread)
        n, shared, levels = x.shape[0], U.shape[1], x.shape[1] // U.shape[1]
        points = x.reshape(n, levels, shared, -1).permute(0, 2, 3, 1)  # (n, S, d, levels)
        z = (U @ points).permute(0, 3, 1, 2).reshape(n, x.shape[1], -1)  # (n, R, m)
        return z * v

    def full_gradient(self, x: torch.Tensor, *, exact: bool = True) -> torch.Tensor:
        """Local gradients at a stack ``(n, R, d)`` (float64 data unless ``exact=False``).

        ``exact=False`` (the per-step gradient) reads the ``compute_dtype`` copy. Either
        runs on the CPU with the native kernel in one pass when the library is there
        (see the module), else with torch.
        """
        U, v = (self._U, self.v) if exact else (self._U_fast, self._v_fast)
        xc = x.to(U.dtype)
        data_term = logistic_data_term(U, xc, -1.0 / self.m, v)
        if data_term is None:
            data_term = self._torch_data_term(U, v, xc)
        return data_term.to(self.dtype) + self.mu * x

    def _torch_data_term(self, U: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``sum_j w_j v_j u_j`` with ``w_j = -sigmoid(-z_j) / m``, ``z = v U x``, by torch."""
        z = self._margins(x, U, v)
        weights = torch.sigmoid(z.neg_()).mul_(-1.0 / self.m).mul_(v)  # -sigmoid(-z) v
        return torch.cat([(w.unsqueeze(-2) @ U).squeeze(-2) for w in self._levels(weights)], 1)

    def objective(self, xbar: torch.Tensor) -> torch.Tensor:
        """``f(xbar) = mean_i f_i(xbar)`` for ``xbar`` of shape ``(R, d)`` -> ``(R,)``."""
        return self._at_mean(xbar)[1]

    def _global_gradient(self, xbar: torch.Tensor) -> torch.Tensor:
        return self.full_gradient(xbar.expand(self.n, -1, -1)).mean(0)

    def _at_mean(self, xbar: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(grad f(xbar), f(xbar))`` from one pass of the C kernel over the float64 data
        (the loss's ``log(1 + e^-z)`` exact to float64's rounding), or ``(None, f(xbar))``
        by torch without the library (``softplus``, which returns ``-z`` below -20)."""
        x = xbar.expand(self.n, -1, -1)
        both = logistic_term_and_loss(self._U, x.to(self._U.dtype), -1.0 / self.m, self.v)
        ridge = 0.5 * self.mu * xbar.pow(2).sum(-1)
        if both is None:
            z = self._margins(x)
            return None, F.softplus(-z).mean(-1).mean(0) + ridge
        term, loss = both
        grad = (term.to(self.dtype) + self.mu * x).mean(0)
        return grad, (loss / self.m).mean(0).to(self.dtype) + ridge

    def _solve(self, max_iter: int = 50) -> torch.Tensor:
        """Damped Newton on f; full steps once in the quadratic region, to machine precision.

        Stops when the squared Newton decrement ``g^T H^{-1} g`` (about twice the
        remaining gap f(x) - f*) falls below 1e-28 for every repetition.
        """
        x = torch.zeros(self.repetitions, self.dim, dtype=self.dtype)
        eye = torch.eye(self.dim, dtype=self.dtype)
        for _ in range(max_iter):
            g = self._global_gradient(x)
            s = torch.sigmoid(self._margins(x.expand(self.n, -1, -1)))
            curv = (s * (1 - s)) / self.m  # (n, R, m)
            # v^2 = 1: (v u)(v u)^T = u u^T, per block of columns sharing samples
            blocks = [
                self._U.transpose(-1, -2) @ (c.unsqueeze(-1) * self._U) for c in self._levels(curv)
            ]
            H = torch.cat(blocks, 1).mean(0) + self.mu * eye
            with one_thread():
                step = torch.linalg.solve(H, g)
            decrement = (g * step).sum(-1)  # (R,)
            if float(decrement.max()) < 1e-28:
                break
            t = torch.ones(self.repetitions, 1, dtype=self.dtype)
            if float(decrement.max()) > 1e-6:  # far from x*: backtrack on f (Armijo)
                f0 = self.objective(x)
                for _ in range(30):
                    worse = self.objective(x - t * step) > f0 - 0.25 * t.squeeze(-1) * decrement
                    if not bool(worse.any()):
                        break
                    t = torch.where(worse.unsqueeze(-1), t / 2, t)
            x = x - t * step
        return x

    # ----------------------------------------------------------------- interface
    def gradient(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.gradient_from(x, self.noise_terms(self.normals(generator)))

    # ------------------------------------------------- many steps (driver.block)
    def noise_terms(self, z: torch.Tensor | None) -> torch.Tensor | None:
        return None if z is None else self.sigma_s2**0.5 * z.to(self.dtype)

    def gradient_from(self, x: torch.Tensor, term: torch.Tensor | None) -> torch.Tensor:
        """:meth:`gradient` with its noise given: the same numbers, bit for bit."""
        grad = self.full_gradient(x, exact=False)
        return grad if term is None else grad + term

    def at_average(self, xbar: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        grad, objective = self._at_mean(xbar)  # the data read once for both where C runs
        grad = self._global_gradient(xbar) if grad is None else grad
        return grad, objective - self.f_star

    def __repr__(self) -> str:
        return (
            f"Logistic(n={self.n}, R={self.repetitions}, m={self.m}, d={self.dim}, "
            f"mu={self.mu}, sigma_s2={self.sigma_s2})"
        )
