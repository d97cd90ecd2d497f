"""Compressed gossip: what compression costs in computation, against what it saves in bytes.

Prints, side by side in one loop (min and median over repeats, each repeat a few calls
of each case back to back):

* a simulated step of CHOCO-SGD (top-k 1/10 and 1/100, qsgd(4), sign) and compressed
  EDM on ring(32) with a float32 state of 32 x 10^5, as a ratio to the fused step of
  DSGD / EDM, with the bytes each agent sends per step. ``fused`` is what the simulator
  runs (the C kernels' compressed round; for CHOCO-SGD with DSGD's update computed in
  it); ``separate`` (CHOCO-SGD only) the same round after DSGD's update has run and
  written its output (what earlier releases ran), timed in the same loop, with the
  ratio fused / separate; ``plain`` the same step compressed, then mixed, in torch
  operations (``kernel="shift"``, what runs without the C kernels; timed at one
  thread, quiet, only: it is slow);
* each step against its memory-traffic bound: the bytes the step must read and write,
  divided by the bandwidth of a measured copy of the state (``2 x 12.8 MB / its time``).
  Per entry of the state, in bytes (float32 state and gradient, float64 public copies
  x_hat and S), the step of

  - DSGD (fused): x and g read, x written: 12;
  - CHOCO-SGD (the update in the round), with each agent's rows read from memory once
    (the kernels run an agent's second pass right after its neighbours' first, while
    their rows are still in cache): the first pass reads x, g and x_hat (16) and adds q
    to x_hat in place (qsgd, sign: 8; top-k at ratio r: 8 (1 - (1 - r)^8), the x_hat
    lines that hold a kept entry), the second writes S (recomputed as W x_hat, not read)
    and the output (12): 36 for qsgd and sign, 28 + 8 (1 - (1 - r)^8) for top-k. With
    the update separate (``separate``): DSGD's update writes z (12) and the round reads
    z in place of x and g (4 fewer): 8 more;
  - compressed EDM (qsgd): EDM's fused update reads x, psi, m, g and writes phi, psi, m
    (28), then the round of phi (32): 60; EDM (fused) 28.

* encoding and decoding one agent's row of 10^6 float32 entries (what a rank of
  torch.distributed does each round), as a ratio to copying the row;

at one thread and torch's default, quiet and with another process keeping a core busy,
with freed memory kept for reuse (``decentopt.perf.keep_freed_memory``) as the simulator
runs states from 8 MB: no step pays for faulting in its output's pages.
Compression pays where sending the bytes saved takes longer than the extra time: at
1 GB/s, 100 KB saved per step buys 0.1 ms.

``--against SRC`` builds the C kernels of another checkout's sources (``SRC``, its ``src``
folder: the kernels before a change) and times CHOCO-SGD's fused step with them in the
same loop (``before``), with the ratio fused / before; ``--steps-only`` leaves out the
codecs and the torch round.

Usage: python benchmarks/bench_compression.py [--repeats 5] [--against ../previous/src]
[--steps-only]
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch
from bench_peers import busy  # benchmarks/ is on the path when run as a script

from decentopt import algorithms, native
from decentopt.algorithms.dsgd import DSGD, DSGDState
from decentopt.comm import SimulatedCommunicator
from decentopt.comm.base import Communicator
from decentopt.comm.mixers import NativeMixer
from decentopt.compression import parse
from decentopt.compression._bits import kept_count, row_keys
from decentopt.perf import keep_freed_memory
from decentopt.topology import ring
from decentopt.updates import descend

N, D, ROW = 32, 100_000, 1_000_000
OPERATORS = ("top_k(0.1)", "top_k(0.01)", "qsgd(4)", "sign")
#: Bytes per entry of the state each step reads and writes (the module docstring): the
#: compressed step by method and operator, and the uncompressed fused step.
STEP_BYTES = {
    ("choco_dsgd", "qsgd(4)"): 36,
    ("choco_dsgd", "sign"): 36,
    ("choco_dsgd", "top_k(0.1)"): 28 + 8 * (1 - 0.9**8),
    ("choco_dsgd", "top_k(0.01)"): 28 + 8 * (1 - 0.99**8),
    ("choco_edm", "qsgd(4)"): 28 + 32,
}
PLAIN_BYTES = {"dsgd": 12, "edm": 28}


@dataclass(frozen=True)
class _SeparateDSGD(DSGD):
    """DSGD whose update the kernels do not know: it runs, then the compressed round."""

    def step(self, state: DSGDState, grad: torch.Tensor, comm: Communicator) -> DSGDState:
        (x_next,) = comm.mix_map(_descend_apart, (state.x, grad), (self.lr_at(state.t),))
        return DSGDState(x=x_next, t=state.t + 1)


class _OtherMixer(NativeMixer):
    """The native mixer running another library's kernels: of the same signatures, or,
    where ``legacy``, a ``decentopt_choco`` of the earlier signature (kept indices and
    values, and the weights in the state's dtype, passed in: releases up to 0.2)."""

    def __init__(self, lib: native.Library, legacy: bool) -> None:
        super().__init__(ring(N))
        self.lib, self.legacy = lib, legacy

    def _function(self, name: str, dtype: torch.dtype) -> ctypes._CFuncPtr:
        suffix = "f32" if dtype == torch.float32 else "f64"
        fn = self.lib.function(name, suffix)
        if self.legacy and name == "decentopt_choco":
            real = ctypes.c_float if suffix == "f32" else ctypes.c_double
            pointer, i64 = ctypes.c_void_p, ctypes.c_int64
            fn.argtypes = [
                ctypes.c_int, i64, i64, i64, i64, ctypes.c_double, ctypes.c_double,
                *[pointer] * 4, real, *[pointer] * 4, i64, ctypes.POINTER(i64),
                ctypes.POINTER(real), ctypes.POINTER(ctypes.c_double), pointer, pointer, real,
                ctypes.c_int,
            ]  # fmt: skip
        return fn

    def choco(self, codec, flat, hat, s, k, gamma, t, descent=None):  # type: ignore[no-untyped-def]
        if not self.legacy:
            return super().choco(codec, flat, hat, s, k, gamma, t, descent)
        n, d = flat.shape
        op, rows = ("top_k", "qsgd", "sign").index(codec.name), d // k
        kept = kept_count(codec.ratio, k) if op == 0 else 0
        keys = row_keys(codec.seed, range(n), range(rows), t) if op == 1 else torch.empty(0)
        levels = float(codec.levels) if op == 1 else 0.0
        per_unit = levels * codec.tau(k) if op == 1 else 1.0
        out = torch.empty_like(flat)
        grad, alpha = descent if descent is not None else (None, 0.0)
        z, x, g = (None, flat.data_ptr(), grad.data_ptr()) if grad is not None else (
            flat.data_ptr(), None, None,
        )  # fmt: skip
        idx, vals, units = self._scratch(
            (n * rows * (kept + 1), torch.int32), (n * rows * (kept + 1), flat.dtype),
            (n * rows * 2, torch.float64),
        )  # fmt: skip
        status = self._function("decentopt_choco", flat.dtype)(
            op, n, d, k, kept, levels, per_unit, z, hat.data_ptr(), s.data_ptr(),
            out.data_ptr(), gamma, keys.data_ptr(), idx.data_ptr(), vals.data_ptr(),
            units.data_ptr(), *self._stencil_args(flat.dtype), self._weights["f64"], x, g,
            alpha, torch.get_num_threads(),
        )  # fmt: skip
        assert status == 0, status
        return out, hat, s


def other_library(src: str) -> tuple[native.Library, bool]:
    """The C kernels of another checkout's sources (``src``: its ``src`` folder), built by
    its own recipe into a temporary folder, run in the variant this checkout's runs; and
    whether its compressed round has the earlier signature."""
    recipe = Path(src) / "decentopt" / "native" / "build.py"
    spec = importlib.util.spec_from_file_location("_other_build", recipe)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--against: no {recipe}")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    ours, why = native.library()
    if ours is None:
        raise SystemExit(f"--against: this checkout's kernels are not in use ({why})")
    folder = Path(tempfile.mkdtemp())
    target = folder / "kernels.so"
    build.build_unix(os.environ.get("CC", "cc").split(), target, folder)
    handle = ctypes.CDLL(str(target))
    legacy = "int32_t *idx" in (recipe.parent / "compress.h").read_text()
    return native.Library(target, f"built from {src}", ours.isa, ours.variants, handle), legacy


def _descend_apart(x: torch.Tensor, g: torch.Tensor, alpha: float) -> tuple[torch.Tensor]:
    return descend(x, g, alpha)


def _timed(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def _stepper(
    name: str,
    kernel: str = "auto",
    separate: bool = False,
    lib: tuple[native.Library, bool] | None = None,
    **hp: object,
):
    comm = SimulatedCommunicator(ring(N), kernel="native" if lib is not None else kernel)
    if lib is not None:  # another checkout's kernels
        comm.mixers = (_OtherMixer(*lib),)
    alg = algorithms.make(name, lr=0.01, **hp)
    if separate:  # the update, then the round
        rule = {f.name: getattr(alg.rule, f.name) for f in fields(alg.rule) if f.init}
        alg = replace(alg, rule=_SeparateDSGD(**rule))
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(N, D, generator=gen) * 1e-2 for _ in range(2)]
    state = [alg.init(torch.randn(N, D, generator=gen)), 0]

    def step() -> None:  # alternating gradients: the differences stay those of a run
        state[0] = alg.step(state[0], grads[state[1] % 2], comm)
        state[1] += 1

    return step, comm


def steps(repeats: int, plain: bool, before: tuple[native.Library, bool] | None) -> None:
    size = torch.empty(N, D)
    copy = torch.empty_like(size)
    cases = [("choco_dsgd", "dsgd", {}, op) for op in OPERATORS]
    cases += [("choco_edm", "edm", {"beta": 0.9}, "qsgd(4)")]
    for name, base, extra, op in cases:
        ours, comm = _stepper(name, compression=op, gamma=0.3, **extra)
        peer, full = _stepper(base, **extra)
        runs = {"fused": ours, base: peer, "copy": lambda: copy.copy_(size)}
        if base == "dsgd":
            runs["separate"] = _stepper(name, separate=True, compression=op, gamma=0.3)[0]
            if before is not None:
                runs["before"] = _stepper(name, lib=before, compression=op, gamma=0.3)[0]
        if plain:
            runs["plain"] = _stepper(name, "shift", compression=op, gamma=0.3, **extra)[0]
        for fn in runs.values():
            fn()  # warm
        times: dict[str, list[float]] = {key: [] for key in runs}
        for _ in range(repeats):
            for key, fn in runs.items():
                times[key].append(_timed(fn, 3))
        bandwidth = [2 * size.numel() * 4 / t for t in times["copy"]]  # bytes per second
        per_entry = STEP_BYTES[name, op]
        bound = [N * D * per_entry / b for b in bandwidth]
        peer_bound = [N * D * PLAIN_BYTES[base] / b for b in bandwidth]

        def ratio(a: list[float], b: list[float]) -> str:
            r = [x / y for x, y in zip(a, b, strict=True)]
            return f"min {min(r):.2f}x, median {statistics.median(r):.2f}x"

        sent = comm.stats.bytes_per_agent / comm.stats.rounds
        whole = full.stats.bytes_per_agent / full.stats.rounds
        print(
            f"  {name} {op:11s} ({comm.compressed_kernel}) step / {base} step: "
            f"{ratio(times['fused'], times[base])} "
            f"({1e3 * statistics.median(times['fused']):.1f} vs "
            f"{1e3 * statistics.median(times[base]):.1f} ms); / its bound "
            f"({per_entry:g} B per entry): {ratio(times['fused'], bound)}; {base} / its bound "
            f"({PLAIN_BYTES[base]} B): {ratio(times[base], peer_bound)}"
        )
        if "separate" in runs:
            print(
                f"    update then round (separate) / {base} step: "
                f"{ratio(times['separate'], times[base])}; fused / separate: "
                f"{ratio(times['fused'], times['separate'])}"
            )
        if "before" in runs:
            print(
                f"    before (--against) / {base} step: {ratio(times['before'], times[base])}; "
                f"fused / before: {ratio(times['fused'], times['before'])}"
            )
        if plain:
            print(
                f"    plain (torch) {name} step / {base} step: {ratio(times['plain'], times[base])}"
            )
        print(
            f"    copy {2 * size.numel() * 4 / 1e9 / statistics.median(times['copy']):.1f} GB/s; "
            f"bytes per agent per step {sent:,.0f} vs {whole:,.0f} ({whole / sent:.0f}x fewer)"
        )


def codecs(repeats: int) -> None:
    row = torch.randn(1, ROW)
    copy = torch.empty_like(row)

    def plain() -> None:
        copy.copy_(row)

    for op in OPERATORS:
        codec = parse(op)
        data = codec.encode(row, 0, 0)
        pairs = []
        decode = lambda c=codec, b=data: c.decode(b, 0, 0, 1, ROW, row.dtype)  # noqa: E731
        for _ in range(repeats):
            base = _timed(plain, 3)
            pairs.append((_timed(lambda c=codec: c.encode(row, 0, 0), 2) / base,
                          _timed(decode, 2) / base))  # fmt: skip
        enc, dec = zip(*pairs, strict=True)
        print(
            f"  {op:12s} encode / copy min {min(enc):.1f}x, median {statistics.median(enc):.1f}x; "
            f"decode / copy min {min(dec):.1f}x, median {statistics.median(dec):.1f}x; "
            f"{data.numel():,} bytes of {4 * ROW:,}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", metavar="SRC", help="another checkout's src: its kernels")
    parser.add_argument("--steps-only", action="store_true", help="no codecs, no torch round")
    args = parser.parse_args()
    keep_freed_memory()  # as the simulator does for states from 8 MB: no page faults per step
    print(native.describe())
    before = other_library(args.against) if args.against else None
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
                quiet = threads == 1 and not loaded
                steps(args.repeats, plain=quiet and not args.steps_only, before=before)
                if not args.steps_only:
                    codecs(args.repeats if quiet else 2)
            finally:
                if hog is not None:
                    stop.set()
                    hog.join()


if __name__ == "__main__":
    main()
