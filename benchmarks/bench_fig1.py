"""Wall time of the full ``fig1`` preset, and the same work one repetition at a time.

The preset runs all 8 algorithms on 4 heterogeneity levels x 20 repetitions
(80 columns of one batched simulation per algorithm) for 3000 iterations.
The comparison runs each of the 80 columns as its own single-repetition
simulation, with the same problem data, recording and dtype. Target: the
preset in at most 15 s on a 2-core CPU.

Run: ``.venv/bin/python benchmarks/bench_fig1.py [--skip-loop]``
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from decentopt.experiments import load_spec, run_spec
from decentopt.problems import Quadratic
from decentopt.simulate import simulate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-loop", action="store_true", help="time the preset only")
    args = parser.parse_args()
    config = load_spec("fig1")
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        run_spec(config, out, progress=False, log=lambda _: None)
        preset = time.perf_counter() - start
    print(
        f"fig1 preset (8 algorithms x 80 columns x {config.iterations} iterations): "
        f"{preset:.1f} s  (target <= 15 s)"
    )
    if args.skip_loop:
        return
    problem = config.build_problem()
    topo = config.build_topology()
    start = time.perf_counter()
    for variant in config.algorithms.values():
        alg = variant.make()
        for col in range(problem.repetitions):
            single = Quadratic(
                problem.A[:, col], problem.x_local[:, col], problem.sigma2, dtype=problem.dtype
            )
            simulate(alg, single, topo, config.iterations, seed=col, points=config.record_points)
    loop = time.perf_counter() - start
    print(
        f"same runs one repetition at a time: {loop:.1f} s  -> batching is {loop / preset:.1f}x "
        f"faster ({torch.get_num_threads()} threads)"
    )


if __name__ == "__main__":
    main()
