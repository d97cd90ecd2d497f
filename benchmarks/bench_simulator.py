"""Speed of the simulator, measured side by side in one run.

1. One batched step over R = 20 repetitions (n = 32, d = 10, EDM on the paper's
   quadratic) against a loop over 20 single-repetition problems doing the same
   step. Target: ratio >= 5.
2. The mixing kernel on a ring with n = 256, d = 1e5 (float32) against the
   memory-bandwidth bound: 8 n d bytes (read Z, write W Z) at the bandwidth of
   a plain tensor copy measured here. Target: within 3x.

Run: ``.venv/bin/python benchmarks/bench_simulator.py``
"""

from __future__ import annotations

import time

import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator


def best_of(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def batched_vs_loop(steps: int = 300) -> tuple[float, float]:
    n, R = 32, 20
    topo = dopt.topology.ring(n)
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    batched = dopt.problems.Quadratic.paper(n=n, repetitions=R, seed=0)
    singles = [
        dopt.problems.Quadratic(batched.A[:, r], batched.x_local[:, r], batched.sigma2)
        for r in range(R)
    ]

    def run_batched() -> None:
        dopt.simulate(alg, batched, topo, steps, record=steps)

    def run_loop() -> None:
        comm = SimulatedCommunicator(topo)
        gens = [torch.Generator().manual_seed(r) for r in range(R)]
        states = [alg.init(p.initial_point()) for p in singles]
        for _ in range(steps):
            for r, p in enumerate(singles):
                states[r] = alg.step(states[r], p.gradient(states[r].x, gens[r]), comm)

    t_batched = best_of(run_batched, 3) / steps
    t_loop = best_of(run_loop, 3) / steps
    return t_batched, t_loop


def mix_vs_bandwidth(n: int = 256, d: int = 100_000) -> dict[str, float]:
    topo = dopt.topology.ring(n)
    Z = torch.randn(n, d)
    out = torch.empty_like(Z)
    sparse = SimulatedCommunicator(topo, kernel="auto")
    dense = SimulatedCommunicator(topo, kernel="dense")
    assert sparse.mixer_for(Z).name in ("native", "shift")  # what "auto" takes for a ring
    return {
        "copy into a buffer": best_of(lambda: out.copy_(Z), 7),
        "copy, allocating (clone)": best_of(lambda: Z.clone(), 7),
        "auto kernel into a buffer": best_of(lambda: sparse.mix(Z, out=out), 7),
        "auto kernel, allocating": best_of(lambda: sparse.mix(Z), 7),
        "dense GEMM into a buffer": best_of(lambda: dense.mix(Z, out=out), 3),
    }


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    t_b, t_l = batched_vs_loop()
    print("1) EDM step on the paper's quadratic, n = 32, d = 10, R = 20")
    print(f"   batched          {t_b * 1e6:9.1f} us / iteration")
    print(f"   loop over R      {t_l * 1e6:9.1f} us / iteration")
    print(f"   speed-up         {t_l / t_b:9.1f}x   (target >= 5x)")
    times = mix_vs_bandwidth()
    n, d = 256, 100_000
    bound = times["copy into a buffer"]
    print("2) mix on ring(256), d = 1e5, float32 (ratios against the copy into a buffer,")
    print(
        f"   i.e. 8 n d bytes at {8 * n * d / bound / 1e9:.1f} GB/s; target <= 3x for the kernel)"
    )
    for label, t in times.items():
        print(f"   {label:28s} {t * 1e3:8.2f} ms  {t / bound:6.2f}x")


if __name__ == "__main__":
    main()
