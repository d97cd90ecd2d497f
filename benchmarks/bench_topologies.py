"""Time-varying topologies: the per-round gather kernel against a copy, and the study's run time.

Prints, for 10^5 agents and rows of 64 float32 entries, the time of one gossip
round of each schedule (W_t picked by round, gather kernel) as a ratio to a
plain copy of the same tensor measured in the same loop (min and median over
repeats), at one thread and torch's default, quiet and with another process
keeping a core busy; the time to build each schedule; then the wall time of
``decentopt reproduce topologies --quick`` (and the full study with --full).

Usage: python benchmarks/bench_topologies.py [--full]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

import torch
from bench_peers import busy, cli_seconds  # benchmarks/ is on the path when run as a script

from decentopt.comm import SimulatedCommunicator
from decentopt.topology import base_graph, one_peer_exponential, random_matchings, ring

N, COLS = 100_000, 64


def mixing(repeats: int = 7, rounds: int = 20) -> None:
    builders = {
        "ring (static, shift kernel)": lambda: ring(N),
        "one_peer_exponential": lambda: one_peer_exponential(N),
        "base_graph(base=3)": lambda: base_graph(N, base=3),
        "random_matchings": lambda: random_matchings(N, seed=0),
    }
    z = torch.randn(N, COLS)
    out = torch.empty_like(z)
    for name, build in builders.items():
        start = time.perf_counter()
        network = build()
        built = time.perf_counter() - start
        for threads in sorted({1, torch.get_num_threads()}):
            torch.set_num_threads(threads)
            comm = SimulatedCommunicator(network)
            for _ in range(2 * rounds):  # every round of the period cached
                comm.mix(z, out=out)
            ratios = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for _ in range(rounds):
                    comm.mix(z, out=out)
                t1 = time.perf_counter()
                for _ in range(rounds):
                    out.copy_(z)
                ratios.append((t1 - t0) / (time.perf_counter() - t1))
            print(
                f"{name:28s} threads {threads}: mix / copy min {min(ratios):.1f}x, median "
                f"{statistics.median(ratios):.1f}x (built in {built:.2f} s)"
            )


def study_seconds(full: bool) -> float:
    return cli_seconds("reproduce", "topologies", "--check", *([] if full else ["--quick"]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--full", action="store_true", help="also time the full study")
    args = parser.parse_args()
    default = torch.get_num_threads()
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__}")
    print(f"one gossip round on ({N}, {COLS}) float32, quiet:")
    mixing()
    torch.set_num_threads(default)
    stop = mp.Event()
    hog = mp.Process(target=busy, args=(stop,))
    hog.start()
    try:
        print("the same with one core kept busy by another process:")
        mixing()
    finally:
        stop.set()
        hog.join()
    torch.set_num_threads(default)
    print(f"reproduce topologies --quick: {study_seconds(False):.1f} s (target < 120 s)")
    if args.full:
        print(f"reproduce topologies: {study_seconds(True):.1f} s (target < 1200 s)")


if __name__ == "__main__":
    main()
