"""The logistic problem's per-step gradient: torch's two batched products vs the C kernel.

Part 1 times ``Logistic.full_gradient(x, exact=False)``'s data term on Figure 2's shapes
(n = 32 agents, R = 60 columns: 20 runs x 3 heterogeneity levels, m = 2000, d = 20,
float32 data) by torch and by the native kernel, each column with its own samples, and
by the kernel with the 3 levels sharing their samples (as ``Logistic.paper`` stores
them: ``--levels``), interleaved, at one thread and at torch's default thread count;
min and median of ``--repeats``. Part 2 (``--fig2 MAIN_SRC``)
times ``decentopt reproduce fig2 --quick`` with another checkout's sources (``MAIN_SRC``,
e.g. ``../previous/src``: before) and this one's (``src``: after), interleaved::

    PYTHONPATH=src python benchmarks/bench_logistic.py
    PYTHONPATH=src python benchmarks/bench_logistic.py --fig2 ../previous/src --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from decentopt import native
from decentopt.native.problems import logistic_data_term

ROOT = Path(__file__).resolve().parents[1]


def _time(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def gradient(repeats: int, rows: tuple[int, int], m: int, d: int, levels: int) -> None:
    gen = torch.Generator().manual_seed(0)
    data = torch.randn(*rows, m, d, generator=gen, dtype=torch.float32)
    x = torch.randn(*rows, d, generator=gen, dtype=torch.float32)
    shared = data[:, : rows[1] // levels].contiguous()  # the levels' common samples
    labels = torch.ones(*rows, m)

    def by_torch() -> torch.Tensor:  # Logistic._torch_data_term's arithmetic
        z = (data @ x.unsqueeze(-1)).squeeze(-1)
        w = torch.sigmoid(z.neg_()).mul_(-1.0 / m)
        return (w.unsqueeze(-2) @ data).squeeze(-2)

    def by_c() -> torch.Tensor:
        out = logistic_data_term(data, x, -1.0 / m)
        assert out is not None, native.library()[1]
        return out

    def by_c_shared() -> torch.Tensor:
        out = logistic_data_term(shared, x, -1.0 / m, labels)
        assert out is not None, native.library()[1]
        return out

    print(native.describe())
    print(f"data term on {(*rows, m, d)} float32 ({data.numel() * 4 / 1e6:.0f} MB), s per call")
    default = torch.get_num_threads()
    for threads in sorted({1, default}):
        torch.set_num_threads(threads)
        t_torch, t_c, t_shared = [], [], []
        for _ in range(repeats):  # interleaved
            t_torch += _time(by_torch, 1)
            t_c += _time(by_c, 1)
            t_shared += _time(by_c_shared, 1)
        median = statistics.median
        print(
            f"threads={threads}: torch min {min(t_torch):.4f} median {median(t_torch):.4f}"
            f" | C min {min(t_c):.4f} median {median(t_c):.4f}"
            f" | C, {levels} levels sharing samples min {min(t_shared):.4f}"
            f" median {median(t_shared):.4f}"
            f" | torch/C {min(t_torch) / min(t_c):.1f}x / {median(t_torch) / median(t_c):.1f}x"
            f" | torch/shared {min(t_torch) / min(t_shared):.1f}x"
            f" / {median(t_torch) / median(t_shared):.1f}x"
        )
    torch.set_num_threads(default)


def fig2(before: str, rounds: int) -> None:
    """``decentopt reproduce fig2 --quick`` wall time, before and after, interleaved."""
    sources = {"before": before, "after": str(ROOT / "src")}
    times: dict[str, list[float]] = {k: [] for k in sources}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for label, src in sources.items():
                env = {**os.environ, "PYTHONPATH": src}
                out = Path(tmp) / f"{label}{r}"
                args = [sys.executable, "-m", "decentopt", "reproduce", "fig2", "--quick"]
                start = time.perf_counter()
                subprocess.run([*args, "--out", str(out)], env=env, check=True,
                               capture_output=True)  # fmt: skip
                times[label].append(time.perf_counter() - start)
                print(f"round {r}: {label} ({src}) {times[label][-1]:.1f} s", flush=True)
    for label, ts in times.items():
        print(f"fig2 --quick {label}: min {min(ts):.1f} s, median {statistics.median(ts):.1f} s")
    ratio = statistics.median(times["before"]) / statistics.median(times["after"])
    print(f"before/after (medians): {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rows", type=int, nargs=2, default=(32, 60), metavar=("N", "R"))
    parser.add_argument("--m", type=int, default=2000)
    parser.add_argument("--d", type=int, default=20)
    parser.add_argument("--levels", type=int, default=3, help="levels sharing samples")
    parser.add_argument("--fig2", metavar="MAIN_SRC", help="also time fig2 --quick: before's src")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    gradient(args.repeats, tuple(args.rows), args.m, args.d, args.levels)
    if args.fig2:
        fig2(args.fig2, args.rounds)


if __name__ == "__main__":
    main()
