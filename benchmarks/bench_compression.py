"""Compressed gossip: what compression costs in computation, against what it saves in bytes.

Prints, side by side in one loop (min and median over repeats):

* a simulated step of CHOCO-SGD (top-k 1/10 and 1/100, qsgd(4), sign) and compressed
  EDM on ring(32) with a float32 state of 32 x 10^5, as a ratio to the uncompressed
  step of DSGD / EDM, with the bytes each agent sends per step;
* encoding and decoding one agent's row of 10^6 float32 entries (what a rank of
  torch.distributed does each round), as a ratio to copying the row;

at one thread and torch's default, quiet and with another process keeping a core busy.
Compression pays where sending the bytes saved takes longer than the extra time: at
1 GB/s, 100 KB saved per step buys 0.1 ms.

Usage: python benchmarks/bench_compression.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable

import torch
from bench_peers import busy  # benchmarks/ is on the path when run as a script

from decentopt import algorithms
from decentopt.comm import SimulatedCommunicator
from decentopt.compression import parse
from decentopt.topology import ring

N, D, ROW = 32, 100_000, 1_000_000
OPERATORS = ("top_k(0.1)", "top_k(0.01)", "qsgd(4)", "sign")


def _timed(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return time.perf_counter() - start


def _ratios(ours: Callable[[], object], peer: Callable[[], object], repeats: int, calls: int):
    """(min ratio, median ratio, median milliseconds of ``ours`` per call)."""
    ours(), peer()  # warm
    pairs = [(_timed(ours, calls), _timed(peer, calls)) for _ in range(repeats)]
    ratios = [a / b for a, b in pairs]
    ms = 1e3 * statistics.median(a for a, _ in pairs) / calls
    return min(ratios), statistics.median(ratios), ms


def _stepper(name: str, **hp: object) -> tuple[Callable[[], object], SimulatedCommunicator]:
    comm = SimulatedCommunicator(ring(N))
    alg = algorithms.make(name, lr=0.01, **hp)
    grad = torch.randn(N, D) * 1e-3
    state = [alg.init(torch.randn(N, D))]

    def step() -> None:
        state[0] = alg.step(state[0], grad, comm)

    return step, comm


def steps(repeats: int) -> None:
    cases = [("choco_dsgd", "dsgd", {}, op) for op in OPERATORS]
    cases += [("choco_edm", "edm", {"beta": 0.9}, "qsgd(4)")]
    for name, base, extra, op in cases:
        ours, comm = _stepper(name, compression=op, gamma=0.3, **extra)
        peer, plain = _stepper(base, **extra)
        low, mid, ms = _ratios(ours, peer, repeats, calls=5)
        sent = comm.stats.bytes_per_agent / comm.stats.rounds
        full = plain.stats.bytes_per_agent / plain.stats.rounds
        print(
            f"  {name} {op:12s} step / {base} step: min {low:.2f}x, median {mid:.2f}x "
            f"({ms:.0f} ms); "
            f"bytes per agent per step {sent:,.0f} vs {full:,.0f} ({full / sent:.0f}x fewer)"
        )


def codecs(repeats: int) -> None:
    row = torch.randn(1, ROW)
    copy = torch.empty_like(row)

    def plain() -> None:
        copy.copy_(row)

    for op in OPERATORS:
        codec = parse(op)
        data = codec.encode(row, 0, 0)
        enc = _ratios(lambda c=codec: c.encode(row, 0, 0), plain, repeats, 3)
        decode = lambda c=codec, b=data: c.decode(b, 0, 0, 1, ROW, row.dtype)  # noqa: E731
        dec = _ratios(decode, plain, repeats, 3)
        print(
            f"  {op:12s} encode / copy min {enc[0]:.1f}x, median {enc[1]:.1f}x ({enc[2]:.1f} ms); "
            f"decode / copy min {dec[0]:.1f}x, median {dec[1]:.1f}x ({dec[2]:.1f} ms); "
            f"{data.numel():,} bytes of {4 * ROW:,}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    default = torch.get_num_threads()
    for threads in sorted({1, default}):
        for loaded in (False, True):
            torch.set_num_threads(threads)
            stop = mp.Event()
            hog = mp.Process(target=busy, args=(stop,)) if loaded else None
            if hog is not None:
                hog.start()
            try:
                print(f"threads {threads}" + (", a core busy" if loaded else ", quiet"))
                steps(args.repeats)
                codecs(args.repeats)
            finally:
                if hog is not None:
                    stop.set()
                    hog.join()


if __name__ == "__main__":
    main()
