"""Step time of 16 simulated agents of a network: gradient vs everything else.

For VGG-11 (32x32x3 inputs, CIFAR-sized random data) and the small digits CNN,
for each gradient backend: time per EDM step on a ring of 16 agents, batch 32
per agent, split into the gradient (forward + backward of all agents) and the
rest (algorithm arithmetic, mixing, bookkeeping), and images per second.
Target: the rest at most 10 % of the gradient time.

Run: ``.venv/bin/python benchmarks/bench_neural.py [--device cuda] [--steps 3]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.data import Dataset
from decentopt.models import make_model
from decentopt.perf import keep_freed_memory
from decentopt.problems.neural import NeuralProblem


def fake_data(shape: tuple[int, ...], samples: int) -> Dataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, *shape, generator=g)
    y = torch.randint(0, 10, (samples,), generator=g)
    return Dataset("random", x, y, x[:10], y[:10], 10)


def bench(
    model_name: str,
    shape: tuple[int, ...],
    backend: str,
    device: str,
    steps: int,
    n: int = 16,
    batch: int = 32,
) -> dict[str, float]:
    data = fake_data(shape, n * batch * 4)
    chunks = tuple(np.array_split(np.arange(len(data.y_train)), n))
    model = make_model(model_name, in_channels=shape[0])
    problem = NeuralProblem(model, data, chunks, batch_size=batch, backend=backend, device=device)
    comm = SimulatedCommunicator(dopt.topology.ring(n))
    alg = dopt.algorithms.make("edm", lr=0.01, beta=0.9)
    state = alg.init(problem.initial_point())

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    for _ in range(3):  # warm-up: the first steps fault in the process's memory
        grads, _ = problem.gradient_and_loss(state.x)
        state = alg.step(state, grads, comm)
    t_grad = t_other = 0.0
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        grads, _ = problem.gradient_and_loss(state.x)
        sync()
        t1 = time.perf_counter()
        state = alg.step(state, grads, comm)
        sync()
        t_grad += t1 - t0
        t_other += time.perf_counter() - t1
    t_grad, t_other = t_grad / steps, t_other / steps
    return {
        "P": problem.dim,
        "grad": t_grad,
        "other": t_other,
        "img/s": n * batch / (t_grad + t_other),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--models", default="small_cnn,vgg11")
    parser.add_argument(
        "--no-keep-freed-memory",
        action="store_true",
        help="leave glibc's defaults (see decentopt.perf)",
    )
    args = parser.parse_args()
    if not args.no_keep_freed_memory:
        keep_freed_memory()
    torch.set_default_dtype(torch.float32)
    shapes = {"small_cnn": (1, 8, 8), "vgg11": (3, 32, 32)}
    print(
        f"torch {torch.__version__}, device {args.device}, {torch.get_num_threads()} threads; "
        "EDM on ring(16), batch 32 per agent"
    )
    print(
        f"{'model':10s} {'backend':7s} {'params':>9s} {'grad s':>8s} {'other s':>8s} "
        f"{'other/grad':>10s} {'img/s':>8s}"
    )
    for name in args.models.split(","):
        for backend in ("loop", "vmap"):
            r = bench(name, shapes[name], backend, args.device, args.steps)
            print(
                f"{name:10s} {backend:7s} {r['P']:9d} {r['grad']:8.3f} {r['other']:8.3f} "
                f"{r['other'] / r['grad']:9.1%} {r['img/s']:8.0f}"
            )


if __name__ == "__main__":
    main()
