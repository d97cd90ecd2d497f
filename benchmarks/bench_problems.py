"""The convex problems' own arithmetic outside the step kernels: what the block path and the
records spend beside the methods.

Two comparisons, each pair timed interleaved in one process, at one thread (the studies'
workers run at one) and at torch's default, min and median of ``--repeats`` rounds of a
few calls each:

* the quadratic's block-path gradient ``H_i x_i - b_i + term_i``
  (``Quadratic.gradient_from``) by the C kernel (``native/quadratic.h``: each Hessian
  read once, products summed in float64) against torch's elementwise product and sum
  (what ran before, and what runs without the library), on the compression study's
  shapes (n = 32, R = 10, d = 100) and on Figure 1's (n = 32, R = 80, d = 10);
* the logistic problem's metrics at one record (``Logistic.metrics``: the gradient and the
  objective at the agents' mean from one pass of the C kernel over the float64 data)
  against the gradient by the kernel, then the objective by torch (the margins of every
  level, then ``softplus``: what ran before), on Figure 2's problem (n = 32, R = 60: 20
  runs x 3 levels, m = 2000, d = 20).

Usage: python benchmarks/bench_problems.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from decentopt import native
from decentopt.native.problems import quadratic_gradient
from decentopt.problems import Logistic


def _timed(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def _pair(ours: Callable[[], object], theirs: Callable[[], object], repeats: int, calls: int):
    ours(), theirs()  # warm
    a, b = [], []
    for _ in range(repeats):
        a.append(_timed(ours, calls))
        b.append(_timed(theirs, calls))
    ratio = [y / x for x, y in zip(a, b, strict=True)]
    return (
        f"{1e3 * min(a):.3f} / {1e3 * statistics.median(a):.3f} ms against "
        f"{1e3 * min(b):.3f} / {1e3 * statistics.median(b):.3f} ms: "
        f"{statistics.median(ratio):.2f}x faster by median (min {min(ratio):.2f}x)"
    )


def quadratic(repeats: int) -> None:
    gen = torch.Generator().manual_seed(0)
    for n, runs, d in ((32, 10, 100), (32, 80, 10)):
        H = torch.randn(n, runs, d, d, generator=gen)
        x, b, term = (torch.randn(n, runs, d, generator=gen) for _ in range(3))
        ours = functools.partial(quadratic_gradient, H, x, b, term)
        theirs = functools.partial(_torch_quadratic, H, x, b, term)
        print(f"  quadratic gradient, ({n}, {runs}, {d}) float32, C / torch sum: "
              f"{_pair(ours, theirs, repeats, 20)}")  # fmt: skip


def _torch_quadratic(H: torch.Tensor, x: torch.Tensor, b: torch.Tensor, term: torch.Tensor):
    return (H * x.unsqueeze(-2)).sum(-1).sub_(b).add_(term)


def logistic(problem: Logistic, repeats: int) -> None:
    x = torch.randn(problem.n, problem.repetitions, problem.dim, dtype=problem.dtype)
    xbar = x.mean(0)

    def ours() -> dict[str, torch.Tensor]:
        return problem.metrics(x)

    def theirs() -> tuple[torch.Tensor, torch.Tensor]:
        grad = problem._global_gradient(xbar)  # the C kernel's pass
        z = problem._margins(xbar.expand(problem.n, -1, -1))  # then torch's
        objective = F.softplus(-z).mean(-1).mean(0) + 0.5 * problem.mu * xbar.pow(2).sum(-1)
        return grad, objective

    print(f"  logistic metrics, Figure 2's problem, one C pass / C gradient then torch "
          f"objective: {_pair(ours, theirs, repeats, 3)}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(native.describe())
    if native.library()[0] is None:
        raise SystemExit("no native library: nothing to compare")
    default = torch.get_num_threads()
    torch.set_num_threads(1)
    problem = Logistic.paper(sigma_h2=(0.1, 1.0, 10.0), compute_dtype=torch.float32)
    for threads in sorted({1, default}):
        torch.set_num_threads(threads)
        print(f"threads {threads}")
        quadratic(args.repeats)
        logistic(problem, args.repeats)


if __name__ == "__main__":
    main()
