"""decentopt against what a user would write by hand, and how cost grows with n·d.

1. The paper's Figure-1 workload (n = 32 ring, d = 10, p = 20, R = 20 runs,
   EDM, 3000 iterations): ``decentopt.simulate`` (its default path, and the step
   path for reference) against a plain vectorised NumPy implementation of the
   same recursion and the same gradient noise distribution and against the same
   loop as a jit-compiled JAX ``lax.scan`` (``pip install -r
   benchmarks/requirements.txt``; skipped with a note without jax), interleaved
   and repeated; min and median microseconds per iteration and the ratios, at
   one thread, at the default threads and at the default threads with a core
   kept busy, each row in a fresh process (JAX reads its thread settings when it
   starts). Then the arithmetic estimate of an iteration -- the measured time
   of drawing its normals with torch's generator (which the results must
   reproduce) plus its floating-point operations at the one-thread rate of a
   large matrix product -- and decentopt's time over it. First in float64 (the
   paper's), then float32 without JAX.
2. Per-iteration time of EDM on the ring for n = 256 ... 8192 agents at d = 100
   (deterministic gradients of a low-memory quadratic), and the fitted exponent
   of the time against n·d.
3. The full ``fig1`` preset with ``--jobs 1`` and ``--jobs 2``, quiet and with
   another process keeping one core busy.
4. A simulated CHOCO-SGD step on ring(32), 32 x 10^5 float32 (top-k 1/10 and 1/100,
   qsgd(4), sign) against the fused DSGD step and against its own memory-traffic bound:
   ``benchmarks/bench_compression.py --steps-only``, run in a fresh process
   (``--compressed-only`` runs this part alone).

The convex studies' wall times, before and after a change, are
``benchmarks/bench_studies.py``'s (20 minutes and more: not run here).

Run: ``.venv/bin/python benchmarks/bench_peers.py [--quick] [--skip-preset] [--fig1-only]
[--compressed-only]``
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import decentopt as dopt


def numpy_edm(A, x_local, sigma2, W, alpha, beta, iterations, seed):
    """EDM on the heterogeneous least-squares problem, as a user would write it."""
    n, R, p, d = A.shape
    H = np.swapaxes(A, -1, -2) @ A / p  # (n, R, d, d)
    b = (H @ x_local[..., None])[..., 0]
    C = np.linalg.cholesky(H) * np.sqrt(sigma2 / p)  # noise sigma/sqrt(p) * C z
    rng = np.random.default_rng(seed)
    x = np.zeros((n, R, d), dtype=A.dtype)
    psi, m = x.copy(), np.zeros_like(x)
    for _ in range(iterations):
        z = rng.standard_normal((n, R, d, 1), dtype=A.dtype)
        g = (H @ x[..., None])[..., 0] - b + (C @ z)[..., 0]
        m = beta * m + (1 - beta) * g
        psi_next = x - alpha * m
        x = (W @ (psi_next + x - psi).reshape(n, -1)).reshape(n, R, d)
        psi = psi_next
    return x


def jax_edm(A, x_local, sigma2, W, alpha, beta, iterations):
    """``numpy_edm``'s loop as one jit-compiled ``lax.scan``: ``seed -> x``, compiled at its
    first call; None when jax is not installed."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    n, R, p, d = A.shape
    H = jnp.swapaxes(A, -1, -2) @ A / p
    b = jnp.einsum("nrij,nrj->nri", H, x_local)
    C = jnp.linalg.cholesky(H) * jnp.sqrt(sigma2 / p)
    mix = jnp.asarray(W)

    def body(carry, key):
        x, psi, m = carry
        z = jax.random.normal(key, (n, R, d), dtype=A.dtype)
        g = jnp.einsum("nrij,nrj->nri", H, x) - b + jnp.einsum("nrij,nrj->nri", C, z)
        m = beta * m + (1 - beta) * g
        psi_next = x - alpha * m
        x = (mix @ (psi_next + x - psi).reshape(n, -1)).reshape(n, R, d)
        return (x, psi_next, m), None

    @jax.jit
    def run(key):
        zeros = jnp.zeros((n, R, d), dtype=A.dtype)
        (x, _, _), _ = jax.lax.scan(body, (zeros, zeros, zeros), jax.random.split(key, iterations))
        return x

    return lambda seed: run(jax.random.PRNGKey(seed)).block_until_ready()


def fig1_problem(dtype: torch.dtype = torch.float64):
    prob = dopt.problems.Quadratic.paper(
        n=32, d=10, p=20, sigma2=0.05, repetitions=20, seed=0, dtype=dtype
    )
    return prob, dopt.topology.ring(32), dopt.algorithms.make("edm", lr=0.05, beta=0.9)


def time_fig1(
    threads: int | None, repeats: int, iterations: int, dtype: torch.dtype = torch.float64
) -> dict[str, list[float]]:
    """Microseconds per iteration of decentopt (its default path and the step path), NumPy
    and JAX (where installed, float64 only), interleaved, all in ``dtype``."""
    if threads is not None:
        torch.set_num_threads(threads)
    prob, topo, alg = fig1_problem(dtype)
    A, xl, W = prob.A.numpy(), prob.x_local.numpy(), topo.W.numpy().astype(prob.A.numpy().dtype)
    work = {
        "decentopt": lambda k: dopt.simulate(alg, prob, topo, iterations, seed=k),
        "decentopt, step path": lambda k: dopt.simulate(
            alg, prob, topo, iterations, seed=k, path="step"
        ),
        "NumPy": lambda k: numpy_edm(A, xl, 0.05, W, 0.05, 0.9, iterations, seed=k),
    }
    jitted = jax_edm(A, xl, 0.05, W, 0.05, 0.9, iterations) if dtype == torch.float64 else None
    if jitted is not None:
        jitted(0)  # compiled here, outside the timing
        work["JAX lax.scan"] = jitted
    work["decentopt"](0)  # the C library is built or loaded here
    times: dict[str, list[float]] = {name: [] for name in work}
    for k in range(repeats):
        for name, fn in work.items():
            start = time.perf_counter()
            fn(k + 1)
            times[name].append((time.perf_counter() - start) / iterations * 1e6)
    return times


def arithmetic_estimate(dtype: torch.dtype, repeats: int) -> tuple[float, float, float, str]:
    """(estimate, noise, compute) microseconds of one Figure-1 EDM iteration, and the path.

    noise: the fastest of ``repeats`` draws of a 50-step block of its normals with torch's
    generator, per step (the results must reproduce those numbers); compute: its
    floating-point operations -- ``H_i x_i`` (2 d^2), the lower-triangular noise factor
    times z (d (d + 1)), ``- b`` (d), EDM's update (9 d) and the three-term mix (5 d) for
    each of the n R agents and runs -- at the one-thread rate of a 1024 x 1024 matrix
    product (the fastest of ``repeats``)."""
    prob, topo, alg = fig1_problem(dtype)
    n, R, d = prob.n, prob.repetitions, prob.dim
    generator = torch.Generator().manual_seed(0)
    noise = min(
        _seconds(lambda: prob.draw(50, generator)) / 50 for _ in range(repeats)
    )  # fmt: skip
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    a = torch.randn(1024, 1024, dtype=dtype)
    rate = 2 * 1024**3 / min(_seconds(lambda: a @ a) for _ in range(repeats))
    torch.set_num_threads(previous)
    flops = n * R * (2 * d * d + d * (d + 1) + d + 9 * d + 5 * d)
    path = dopt.simulate(alg, prob, topo, 2).path
    return (noise + flops / rate) * 1e6, noise * 1e6, flops / rate * 1e6, path


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fig1_row(threads: int, repeats: int, iterations: int, dtype: torch.dtype, label: str) -> None:
    """One row of part 1 (run in its own process by :func:`fig1_rows`)."""
    times = time_fig1(threads, repeats, iterations, dtype)
    ours = times["decentopt"]
    parts = []
    for name, values in times.items():
        ratio = [v / o for o, v in zip(ours, values, strict=True)]
        versus = "" if name == "decentopt" else (
            f" ({statistics.median(ratio):.2f}x decentopt's time, min {min(ratio):.2f}x)"
        )  # fmt: skip
        parts.append(f"{name} {min(values):.0f} / {statistics.median(values):.0f}{versus}")
    if dtype == torch.float64 and "JAX lax.scan" not in times:
        parts.append("JAX: not installed (pip install -r benchmarks/requirements.txt)")
    estimate, noise, compute, path = arithmetic_estimate(dtype, repeats)
    print(
        f"fig1 workload, {str(dtype)[6:]}, {label}: us/it min / median: " + "; ".join(parts)
        + f". Arithmetic estimate {estimate:.0f} us/it (normals {noise:.0f} + flops "
        f"{compute:.0f}); decentopt ({path} path) / estimate: min {min(ours) / estimate:.2f}x,"
        f" median {statistics.median(ours) / estimate:.2f}x"
    )  # fmt: skip


def fig1_rows(quick: bool, default: int) -> None:
    """Part 1: each row in a fresh process, its threads set before anything starts."""
    for dtype in ("float64", "float32"):
        for threads, loaded in ((1, False), (default, False), (default, True)):
            env = dict(os.environ)
            if threads == 1:  # NumPy's BLAS and XLA at one thread too
                env |= {f"{v}_NUM_THREADS": "1" for v in ("OMP", "MKL", "OPENBLAS")}
                env["XLA_FLAGS"] = (
                    "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
                )
            label = f"threads {threads}{', one core busy' if loaded else ''}"
            command = [sys.executable, __file__, "--fig1-row", str(threads), dtype, label]
            stop = mp.Event()
            hog = mp.Process(target=busy, args=(stop,)) if loaded else None
            if hog is not None:
                hog.start()
            try:
                subprocess.run([*command, *(["--quick"] if quick else [])], check=True, env=env)
            finally:
                stop.set()
                if hog is not None:
                    hog.join()


def scaling(sizes: list[int], d: int, iterations: int) -> list[tuple[int, float]]:
    alg = dopt.algorithms.make("edm", lr=0.1, beta=0.9)
    out = []
    for n in sizes:
        prob = dopt.problems.Quadratic.paper(n=n, d=d, p=10, sigma2=0.0, repetitions=1, seed=0)
        topo = dopt.topology.ring(n)
        dopt.simulate(alg, prob, topo, 5, record=5)  # warm-up
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            dopt.simulate(alg, prob, topo, iterations, record=iterations)
            best = min(best, (time.perf_counter() - start) / iterations)
        out.append((n, best))
    return out


def large_state(
    repeats: int, label: str, graph: str = "ring", n: int = 256, d: int = 100_000
) -> None:
    """EDM step and mix on an (n, d) float32 state against the measured copy time.

    A copy reads and writes the state once (2 passes); an EDM step must read x, psi,
    m, g and write x, psi, m (7 passes), so its bound is 3.5 copies. By default the
    simulator fuses EDM's update with the mix in a C kernel; ``kernel="shift"`` shows
    the step unfused, ``kernel="compiled"`` fused by torch.compile.
    """
    from decentopt.comm import SimulatedCommunicator
    from decentopt.perf import keep_freed_memory
    from decentopt.topology.circulant import CirculantTopology

    keep_freed_memory()
    topology = getattr(dopt.topology, graph)(n)
    # update, then mix: no fusion (a small ring is stored dense and mixed by a GEMM)
    plain = "shift" if isinstance(topology, CirculantTopology) else "dense"
    eager = SimulatedCommunicator(topology, kernel=plain)
    default = SimulatedCommunicator(topology)  # kernel="auto": the native fused step
    alg = dopt.algorithms.make("edm", lr=0.01, beta=0.9)
    x = torch.randn(n, d)
    g, state = torch.randn_like(x), alg.init(x)
    alg.step(state, g, default)  # the C build happens here, outside the timing
    work = {
        "copy": x.clone,
        f"{graph} mix, {plain} kernel": lambda: eager.mix(x),
        f"{graph} mix, default (native C kernel)": lambda: default.mix(x),
        "EDM step, update then mix": lambda: alg.step(state, g, eager),
        "EDM step, fused (default: the C kernels' best variant for this CPU)": lambda: alg.step(
            state, g, default
        ),
    }
    from decentopt import native
    from decentopt.comm.mixers import NativeMixer

    lib = native.library()[0]
    for isa in lib.variants[1:] if lib is not None else ():  # the variants below the default
        lower = SimulatedCommunicator(topology, kernel="native")
        lower.mixers = (NativeMixer(topology, isa=isa),)
        alg.step(state, g, lower)
        work[f"EDM step, fused ({isa} variant of the C kernels)"] = lambda c=lower: alg.step(
            state, g, c
        )
    if plain == "shift":  # torch.compile's kernels are for circulant topologies
        compiled = SimulatedCommunicator(topology, kernel="compiled")
        compiled.mix(x)  # compilation happens here, outside the timing
        alg.step(state, g, compiled)
        work[f"{graph} mix, kernel='compiled'"] = lambda: compiled.mix(x)
        work["EDM step, fused by torch.compile"] = lambda: alg.step(state, g, compiled)
    timings: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(repeats):
        for name, fn in work.items():
            fn()
            start = time.perf_counter()
            for _ in range(3):
                fn()
            timings[name].append((time.perf_counter() - start) / 3)
    copy = statistics.median(timings["copy"])
    for name in list(work)[1:]:
        bound = 3.5 * copy if "step" in name else copy
        ratios = [t / bound for t in timings[name]]
        print(
            f"{label}: {name} on ({n}, {d}) float32: "
            f"{statistics.median(timings[name]) * 1e3:.1f} ms, {min(ratios):.2f}x / "
            f"{statistics.median(ratios):.2f}x its memory bound (copy {copy * 1e3:.1f} ms"
            f"{'; target <= 1.5x' if graph == 'ring' and n == 256 else ''})"
        )


def huge_ring() -> None:
    """``ring(100000)``: build it, its lambda (closed form), one mix of a (100000, 10) state."""
    start = time.perf_counter()
    topo = dopt.topology.ring(100_000)
    built = time.perf_counter() - start
    start = time.perf_counter()
    lam = topo.lam
    spectral = time.perf_counter() - start
    from decentopt.comm import SimulatedCommunicator

    comm, z = SimulatedCommunicator(topo), torch.randn(100_000, 10)
    comm.mix(z)
    start = time.perf_counter()
    comm.mix(z)
    mixed = time.perf_counter() - start
    print(
        f"ring(100000): built in {built * 1e3:.1f} ms, lambda = {lam:.10f} in "
        f"{spectral * 1e3:.2f} ms, a (100000, 10) mix in {mixed * 1e3:.1f} ms (target < 1 s each)"
    )


def busy(stop: mp.Event) -> None:  # type: ignore[valid-type]
    x = 0
    while not stop.is_set():  # type: ignore[attr-defined]
        x += 1


def cli_seconds(*args: str) -> float:
    """Wall time of one ``decentopt`` command writing into a temporary folder."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "decentopt", *args, "--out", out, "--no-progress"]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        return time.perf_counter() - start


def preset_seconds(jobs: int, quick: bool) -> float:
    return cli_seconds("reproduce", "fig1", "--jobs", str(jobs), *(["--quick"] if quick else []))


def large_states(repeats: int, default: int) -> None:
    """The large state at one thread and at ``default``, quiet and with a core busy."""
    for threads in (1, default):
        for loaded in (False, True):
            torch.set_num_threads(threads)
            stop = mp.Event()
            hog = mp.Process(target=busy, args=(stop,)) if loaded else None
            if hog is not None:
                hog.start()
            try:
                label = f"threads {threads}{', one core busy' if loaded else ''}"
                large_state(repeats, label)
            finally:
                stop.set()
                if hog is not None:
                    hog.join()


def compressed_steps(repeats: int) -> None:
    """Part 4: bench_compression.py's compressed steps, in a fresh process."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_compression.py")
    command = [sys.executable, script, "--steps-only", "--repeats", str(repeats)]
    subprocess.run(command, check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer iterations and repeats")
    parser.add_argument("--skip-preset", action="store_true")
    parser.add_argument(
        "--large-only", action="store_true", help="only the large-state rows (ring(256), 10^5)"
    )
    parser.add_argument("--fig1-only", action="store_true", help="only part 1")
    parser.add_argument("--compressed-only", action="store_true", help="only part 4")
    parser.add_argument("--fig1-row", nargs=3, help=argparse.SUPPRESS)  # threads dtype label
    args = parser.parse_args()
    iterations, repeats = (500, 3) if args.quick else (3000, 5)
    if args.fig1_row:
        threads, dtype, label = args.fig1_row
        fig1_row(int(threads), repeats, iterations, getattr(torch, dtype), label)
        return
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__}, numpy {np.__version__}")
    from decentopt import native

    print(native.describe())
    default = torch.get_num_threads()
    if args.compressed_only:
        compressed_steps(3 if args.quick else 7)
        return
    if args.large_only:
        large_states(3 if args.quick else 5, default)
        return
    fig1_rows(args.quick, default)
    if args.fig1_only:
        return
    torch.set_num_threads(default)
    sizes = [256, 1024, 2048, 8192] if not args.quick else [256, 1024, 2048]
    rows = scaling(sizes, 100, 50 if args.quick else 200)
    for n, sec in rows:
        print(f"EDM on ring({n}), d = 100: {sec * 1e6:.0f} us/it")
    slope = np.polyfit(np.log([n * 100 for n, _ in rows]), np.log([s for _, s in rows]), 1)[0]
    print(f"fitted exponent of time in n*d: {slope:.2f} (target <= 1.1)")
    huge_ring()
    large_states(3 if args.quick else 5, default)
    torch.set_num_threads(1)
    large_state(3, "threads 1", graph="exponential")  # 16 terms per mix
    for threads in (1, default):  # a tall state: many agents, shorter rows
        torch.set_num_threads(threads)
        large_state(3, f"threads {threads}", n=20_000, d=1_000)
    for threads in (1, default):  # ring(16), stored dense, with a VGG-11-sized state
        torch.set_num_threads(threads)
        large_state(3, f"threads {threads}", n=16, d=9_231_114)
    torch.set_num_threads(default)
    compressed_steps(3 if args.quick else 7)
    if args.skip_preset:
        return
    for jobs in (1, 2):
        quiet = preset_seconds(jobs, args.quick)
        stop = mp.Event()
        hog = mp.Process(target=busy, args=(stop,))
        hog.start()
        try:
            loaded = preset_seconds(jobs, args.quick)
        finally:
            stop.set()
            hog.join()
        print(
            f"fig1 preset{' --quick' if args.quick else ''} --jobs {jobs}: {quiet:.1f} s quiet, "
            f"{loaded:.1f} s with one core busy ({loaded / quiet:.2f}x)"
        )


if __name__ == "__main__":
    main()
