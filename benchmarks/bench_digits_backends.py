"""The methods study's digits problem: the loop and grouped backends side by side, interleaved.

One process, one thread (as a unit of the study runs): a step's gradients of the 16
agents' small CNNs and one evaluation (the metrics the study records), each backend
in turn, repeated; min and median in milliseconds, and the loop backend's time over the
grouped one's.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_digits_backends.py [--repeats N]``
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from decentopt.experiments import load_spec

BACKENDS = ("loop", "grouped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6, help="gradient steps per repeat")
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = load_spec("methods_digits", quick=True)
    problems = {
        b: dataclasses.replace(spec.params, backend=b).build(
            agents=spec.agents, runs=1, seed=spec.seeds.data, rank=None
        )
        for b in BACKENDS
    }
    x = problems["loop"].initial_point()
    x = x + 0.01 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    grads: dict[str, list[float]] = {b: [] for b in BACKENDS}
    evals: dict[str, list[float]] = {b: [] for b in BACKENDS}
    for _ in range(args.repeats):
        for b, problem in problems.items():
            noise = torch.Generator().manual_seed(1)
            start = time.perf_counter()
            for _ in range(args.steps):
                problem.gradient_and_loss(x, noise)
            grads[b].append(1e3 * (time.perf_counter() - start) / args.steps)
            start = time.perf_counter()
            problem.metrics(x)
            evals[b].append(1e3 * (time.perf_counter() - start))
    print(f"{'backend':8s} {'gradient ms (min / median)':>28s} {'metrics ms (min / median)':>27s}")
    for b in BACKENDS:
        g, e = grads[b], evals[b]
        print(
            f"{b:8s} {min(g):>15.1f} / {statistics.median(g):<10.1f} "
            f"{min(e):>14.1f} / {statistics.median(e):<10.1f}"
        )
    for name, t in (("gradient", grads), ("metrics", evals)):
        ratio = (
            min(t["loop"]) / min(t["grouped"]),
            statistics.median(t["loop"]) / statistics.median(t["grouped"]),
        )
        print(f"loop / grouped, {name}: {ratio[0]:.2f}x / {ratio[1]:.2f}x")


if __name__ == "__main__":
    main()
