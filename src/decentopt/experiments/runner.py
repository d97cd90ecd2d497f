"""Run a specification: every unit of work through the store and the one loop.

A unit is one algorithm variant with all its runs and panel levels batched into
the columns of one problem (convex kinds), or one (variant, run) pair (neural
kind). Every algorithm sees the same problem, graph and noise (seeds by role).
Each unit goes through :meth:`~decentopt.experiments.store.ResultStore.cached`,
so an interrupted sweep resumes, a changed setting reruns only what it affects
and nothing corrupt is trusted. Under ``torchrun`` every process holds one
agent, gossips with its neighbours, and rank 0 writes the results.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import re
import signal
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from decentopt._process import die_with_parent
from decentopt.comm.accelerated import MultiRound
from decentopt.comm.distributed import DistributedCommunicator
from decentopt.comm.simulated import SimulatedCommunicator
from decentopt.distributed import runtime
from decentopt.driver import intra_op_threads, run_loop
from decentopt.driver.timeline import clock_rows
from decentopt.experiments.spec import ConfigError, RunSpec, Variant
from decentopt.experiments.store import ResultStore, Unit
from decentopt.perf import MEMORY_MARGIN, available_memory, gib, keep_freed_memory
from decentopt.plan import TAIL_POINTS
from decentopt.problems.neural import BatchedRuns, NeuralProblem
from decentopt.results import lock_folder, write_csv_atomic
from decentopt.topology.footprint import build_bytes

__all__ = ["Outcome", "check_memory", "memory_parts", "run_spec"]

#: What forked workers compute with (set just before the fork, inherited, never pickled).
_WORK: dict[str, Any] = {}


def _work(index: int) -> tuple[int, tuple[list, dict]]:
    _unit, variant, group = _WORK["pending"][index]
    with intra_op_threads(1, 0):
        return index, _WORK["compute"](variant, group, Path())


def _start_worker() -> None:
    die_with_parent(signal.SIGKILL)  # a killed sweep leaves no worker computing on


def _in_workers(
    jobs: int,
    pending: list,
    compute: Callable,
    build: Callable,
    keep: Callable[[Any, tuple[list, dict]], None],
    say: Callable,
) -> None:
    """Compute ``pending`` units in ``jobs`` forked processes; ``keep(unit, result)`` stores
    each one as soon as its worker returns it (an interrupted sweep keeps what finished)."""
    with intra_op_threads(1, 0):  # no thread pool may exist in the parent when it forks
        build(None)  # the batched problem, built once and inherited by every worker
        _WORK.update(pending=pending, compute=compute)
        context = multiprocessing.get_context("fork")
        pool = ProcessPoolExecutor(
            min(jobs, len(pending)), mp_context=context, initializer=_start_worker
        )
        try:
            futures = [pool.submit(_work, index) for index in range(len(pending))]
            for count, future in enumerate(as_completed(futures), start=1):
                index, result = future.result()
                keep(pending[index][0], result)
                say(f"  {pending[index][0].name:14s} done ({count}/{len(pending)})")
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            _WORK.clear()


def _run_groups(spec: RunSpec) -> list[tuple[int, ...] | None]:
    """The units over runs: ``[None]`` (all runs as columns of one problem) or groups."""
    kind = spec.params
    return [None] if kind.batch_runs else list(kind.run_groups(spec.runs, spec.agents))


def say_line(text: str) -> None:
    """Print one whole line in a single write: lines of parallel workers never run together."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def unit_folder(name: str) -> str:
    """The folder name of a unit: its name with anything but ``\\w . = ( ) , + -`` as ``_``;
    a name too long for a file system (255 bytes) is cut, with a digest of the whole."""
    folder = re.sub(r"[^\w.=(),+-]", "_", name)
    if len(folder.encode()) <= 200:
        return folder
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return folder.encode()[:160].decode(errors="ignore") + "-" + digest


#: Bytes a result row takes in memory, through the report (measured: 1.6 KB on a grid of
#: 47 variants).
ROW_BYTES = 1600
#: A figure panel of the report while it is drawn and saved (its curves are bounded:
#: plotting.MOST_CURVES; measured: a grid of 1,000 variants peaks at 427 MB in all).
FIGURE_BYTES = 32 << 20
#: What a run loads and holds besides its problem: plotting, reports, buffers (measured:
#: 55 MB above the import of the package for the smallest sweeps).
RUN_OVERHEAD = 64 << 20


def memory_parts(spec: RunSpec) -> dict[str, float]:
    """About how many bytes a run holds beyond what the process holds already, by part."""
    runs = max(spec.runs if g is None else len(g) for g in _run_groups(spec))
    parts = dict(spec.params.memory_bytes(agents=spec.agents, runs=runs))
    levels = len(getattr(spec.params, spec.panel)) if spec.panel else 1
    records = spec.record_points + TAIL_POINTS + 2  # a log grid's points at most
    rows = len(spec.algorithms) * spec.runs * levels * records
    parts["result rows and their report"] = rows * ROW_BYTES
    parts["libraries and buffers of a run"] = RUN_OVERHEAD
    parts["figures of the report"] = FIGURE_BYTES * levels
    tables = {json.dumps(spec.topology_of(label), sort_keys=True) for label in spec.algorithms}
    parts["graphs"] = sum(
        build_bytes(t["name"], spec.agents, t) for t in (json.loads(k) for k in tables)
    )
    return parts


def check_memory(spec: RunSpec, available: float | None = None) -> float:
    """Refuse, before anything is allocated or written, a run that cannot fit in memory;
    returns the estimate in bytes (beyond what the process holds already)."""
    parts = memory_parts(spec)
    need = float(sum(parts.values()))
    available = available_memory() if available is None else available
    if available is not None and need * MEMORY_MARGIN > available:
        big = sorted(((v, k) for k, v in parts.items() if v), reverse=True)
        detail = ", ".join(f"{k} {gib(v)}" for v, k in big)
        knobs = (
            "runs, agents, record_points, the grids of [algorithms] or the sizes in "
            "[problem_params]"
        )
        raise ConfigError(
            f"{spec.source}: this run needs about {gib(need)} ({detail}), and peaks reach "
            f"{MEMORY_MARGIN:g} times the estimate, but {gib(available)} of memory are "
            f"available; lower {knobs}"
        )
    return need


@dataclass
class Outcome:
    rows: list[dict[str, Any]]
    ran: list[str]
    kept: list[str]
    seconds: float
    main: bool = True  # this process reports (rank 0)


def run_spec(
    spec: RunSpec,
    out: str | Path,
    *,
    force: bool = False,
    progress: bool = True,
    jobs: int = 1,
    log: Callable[[str], None] = say_line,
) -> Outcome:
    """Run (or resume) every unit of ``spec``; all rows are also written to ``OUT/results.csv``.

    ``jobs > 1`` computes the units of a batched (convex) sweep in that many forked
    worker processes, one thread each; the results are those of a serial run.
    """
    start = time.perf_counter()
    job = runtime.job(spec.timeout)
    if job.world > 1 and job.world != spec.agents:
        raise ConfigError(
            f"{spec.source}: {spec.agents} agents but {job.world} processes; launch with "
            f"--nproc-per-node {spec.agents} (one agent per process)"
        )
    say = log if job.main else (lambda _: None)
    check_memory(spec)  # before anything is built or written
    kind, seeds = spec.params, spec.seeds
    topo = spec.build_topology()
    graphs: dict[str, tuple[Any, DistributedCommunicator | None]] = {}

    def graph_for(label: str) -> tuple[Any, DistributedCommunicator | None]:
        """The variant's graph (built once per distinct table) and, under torchrun, the
        communicator over it (made in the same order on every rank: units run in order)."""
        key = json.dumps(spec.topology_of(label), sort_keys=True, default=repr)
        if key not in graphs:
            network = spec.build_topology(label)
            comm = DistributedCommunicator(network, timeout=spec.timeout) if job.world > 1 else None
            graphs[key] = (network, comm)
        return graphs[key]

    barrier = lambda: job.barrier(spec.timeout)  # noqa: E731
    store = ResultStore(Path(out) / "runs", force=force, writer=job.main, barrier=barrier)
    keep_freed_memory()
    built: dict[int | None, Any] = {}

    def problem_for(group: tuple[int, ...] | None) -> Any:
        if group is None and group in built:  # a batched problem serves every variant
            return built[group]
        t0 = time.perf_counter()
        try:
            problem = spec.build_problem(group, job.rank if job.world > 1 else None)
        except (MemoryError, RuntimeError) as exc:  # the allocator refused
            if "alloc" not in str(exc).lower() and not isinstance(exc, MemoryError):
                raise
            raise ConfigError(
                f"{spec.source}: the problem does not fit in memory ({str(exc).splitlines()[0]}); "
                "lower runs, agents or the problem's sizes in [problem_params]"
            ) from None
        say(f"{spec.name}: {problem!r} on {topo!r} (built in {time.perf_counter() - t0:.1f} s)")
        built[group] = problem
        return problem

    def compute(variant: Variant, group: tuple[int, ...] | None, folder: Path) -> tuple[list, dict]:
        problem = problem_for(group)
        run = None if group is None else group[0]
        network, shared = graph_for(variant.label)
        if shared is not None:  # every unit starts at round 0 (schedules, counts, seeds)
            shared.stats.reset()
        comm = shared or SimulatedCommunicator(network)
        if spec.mix_rounds > 1:
            comm = MultiRound(comm, spec.mix_rounds, spec.acceleration)
        if shared is not None:
            shared.check_consistency(extra=f"{variant.label}:{run}:{problem.dim}")
        plan = kind.plan(problem, spec.iterations, spec.record_points)
        alg = variant.make()
        alg = alg.with_hyperparams(lr=kind.step_size(alg.lr, problem))
        noise = seeds.noise + (run or 0)
        labels = kind.columns(problem)
        if run is not None:  # runs of a group are numbered from its first
            labels = [c | {"run": run + c.get("run", 0)} for c in labels]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1000 + noise + 7919 * job.rank)  # dropout, per agent
            checkpoints = folder if plan.period else None
            result = run_loop(
                alg,
                problem,
                comm,
                plan,
                seed=noise,
                checkpoint_dir=checkpoints,
                checkpoint_every=spec.checkpoint_every,
                checkpoint_minutes=spec.checkpoint_minutes,
                threads=spec.threads,
                progress=progress and job.main,
                labels=labels,
                log=say,
            )
        result.algorithm = variant.label
        n_div = int(result.diverged.sum())
        which = variant.label + (
            ""
            if group is None
            else f" run {run}"
            if len(group) == 1
            else f" runs {run}-{group[-1]}"
        )
        say(f"  {which:14s} {result.wall_time:7.2f} s" + (f", {n_div} diverged" if n_div else ""))
        facts = {"seconds": result.wall_time, "diverged": n_div, "gossip_rounds": comm.stats.rounds}
        if isinstance(problem, NeuralProblem | BatchedRuns):  # the rule's choice, on record
            facts["backend"] = problem.backend
        return result.rows, facts

    # one run writes a folder at a time; stale temporary files of killed writes go
    with lock_folder(out) if job.main else contextlib.nullcontext():
        rows: list[dict[str, Any]] = []
        groups = _run_groups(spec)
        units = []
        for group in groups:
            run = None if group is None else group[0]
            for variant in spec.algorithms.values():
                name = variant.label + (
                    ""
                    if group is None
                    else f"-run{run}"
                    if len(group) == 1
                    else f"-runs{run}-{group[-1]}"
                )
                info = {"algorithm": variant.label, "method": variant.method, "run": run}
                if group is not None and len(group) > 1:
                    info["runs"] = list(group)
                info["hyperparams"] = variant.hyperparams
                if variant.topology is not None:
                    info["topology"] = variant.topology
                folder = unit_folder(name)
                if folder in {u.name for u, _, _ in units}:
                    raise ConfigError(
                        f"{spec.source}: two algorithm variants would share the result folder "
                        f"{folder!r}; give them labels that differ in letters or digits"
                    )
                units.append(
                    (Unit(folder, spec.fingerprint(variant.label, run), info), variant, group)
                )
        finished: dict[str, list[dict[str, Any]]] = {}  # stored by the workers' parent

        def keep(unit: Unit, result: tuple[list, dict]) -> None:
            finished[unit.name] = store.cached(unit, lambda _folder: result)

        if jobs > 1 and groups == [None] and job.world == 1:
            with warnings.catch_warnings():  # the store warns about a corrupt unit when run
                warnings.simplefilter("ignore")
                pending = [u for u in units if force or store.stored(u[0]) is None]
            if len(pending) > 1:
                _in_workers(jobs, pending, compute, problem_for, keep, say)
        for unit, variant, group in units:
            if unit.name in finished:
                rows += finished[unit.name]
                continue
            rows += store.cached(unit, lambda folder, v=variant, g=group: compute(v, g, folder))
    if store.kept:
        say(f"resumed: {len(store.kept)} finished unit(s) kept ({', '.join(store.kept)})")
    for row in rows:  # the network model is presentation: applied to stored rows too
        row["model_time"] = spec.network.seconds(
            row["step"], row["busiest_messages"], row["busiest_bytes"]
        )
    if spec.timing is not None:  # so is the time model; its clock is then the modelled time
        clock_rows(
            rows, spec.timing, lambda a: graph_for(a)[0], lambda a: spec.algorithms[a].make()
        )
        for row in rows:
            row["model_time"] = row["sim_time"]
    if job.main:
        write_csv_atomic(Path(out) / "results.csv", rows)
    barrier()
    return Outcome(rows, store.ran, store.kept, time.perf_counter() - start, job.main)
