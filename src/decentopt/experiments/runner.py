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
import functools
import hashlib
import json
import multiprocessing
import re
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from decentopt._process import die_with_parent
from decentopt.comm.distributed import DistributedCommunicator
from decentopt.comm.simulated import SimulatedCommunicator
from decentopt.distributed import runtime
from decentopt.driver import RunOptions, intra_op_threads, run_loop
from decentopt.driver.timeline import clock_rows
from decentopt.experiments.spec import ConfigError, RunSpec, Variant
from decentopt.experiments.store import ResultStore, Unit
from decentopt.perf import MEMORY_MARGIN, available_memory, gib, keep_freed_memory
from decentopt.plan import TAIL_POINTS
from decentopt.problems.neural import BatchedRuns, NeuralProblem
from decentopt.results import lock_folder, write_csv_atomic
from decentopt.topology.footprint import build_bytes

__all__ = ["Outcome", "Sweep", "check_memory", "forked_map", "memory_parts", "run_spec"]

R = TypeVar("R")

#: What forked workers compute with (set just before the fork, inherited, never pickled).
_WORK: dict[str, Any] = {}


def _work(index: int) -> tuple[int, tuple[list, dict]]:
    with intra_op_threads(1, 0):
        return index, _WORK["compute"](*_WORK["pending"][index])


def _forked(jobs: int, pending: list, compute: Callable) -> Iterator[tuple[int, Any]]:
    """``(index, compute(*pending[index]))`` as ``jobs`` forked processes, one thread each,
    finish them; ``pending`` and ``compute`` are inherited, only the results pickled."""
    with intra_op_threads(1, 0):  # no thread pool may exist in the parent when it forks
        _WORK.update(pending=pending, compute=compute)
        context = multiprocessing.get_context("fork")
        # a killed sweep leaves no worker computing on
        stop = functools.partial(die_with_parent, signal.SIGKILL)
        pool = ProcessPoolExecutor(min(jobs, len(pending)), mp_context=context, initializer=stop)
        try:
            futures = [pool.submit(_work, index) for index in range(len(pending))]
            for future in as_completed(futures):
                yield future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            _WORK.clear()


def forked_map(jobs: int, compute: Callable[..., R], pending: Sequence[tuple]) -> list[R]:
    """``[compute(*args) for args in pending]``, in ``jobs`` forked processes (one thread
    each) if more than one of both: the sweeps of a graph study, the figures of a report."""
    if jobs < 2 or len(pending) < 2:
        return [compute(*args) for args in pending]
    return [r for _, r in sorted(_forked(jobs, list(pending), compute), key=lambda x: x[0])]


def _in_workers(
    jobs: int,
    pending: list,
    compute: Callable,
    build: Callable[[], Any],
    keep: Callable[[Any, tuple[list, dict]], None],
    say: Callable,
) -> None:
    """Compute ``pending`` units in ``jobs`` forked processes; ``keep(unit, result)`` stores
    each one as soon as its worker returns it (an interrupted sweep keeps what finished).
    ``build()`` first: what every worker inherits (the batched problem, or the data set)."""
    with intra_op_threads(1, 0):  # built with the workers' one thread
        build()
        for count, (index, result) in enumerate(_forked(jobs, pending, compute), start=1):
            keep(pending[index][0], result)
            say(f"  {pending[index][0].name:14s} done ({count}/{len(pending)})")


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
        raise ConfigError(
            f"{spec.source}: this run needs about {gib(need)} ({detail}), and peaks reach "
            f"{MEMORY_MARGIN:g} times the estimate, but {gib(available)} of memory are "
            "available; lower runs, agents, record_points, the grids of [algorithms] or the "
            "sizes in [problem_params]"
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
    options = RunOptions(force=force, progress=progress, jobs=jobs, log=log)
    return Sweep(spec, Path(out), options).run()


def unit_name(label: str, group: tuple[int, ...] | None) -> str:
    """A unit's name: the variant's label, and its runs when they are units of their own."""
    if group is None:
        return label
    return f"{label}-run{group[0]}" if len(group) == 1 else f"{label}-runs{group[0]}-{group[-1]}"


class Sweep:
    """The units of one specification, computed or resumed through the store.

    Every variant sees the same problem, graph and noise; a graph is built once per
    distinct table (and, under torchrun, its communicator made in the same order on
    every rank: units run in order), a batched problem once for every variant.
    """

    def __init__(self, spec: RunSpec, out: Path, options: RunOptions) -> None:
        self.start = time.perf_counter()
        self.job = runtime.job(spec.timeout)
        if self.job.world > 1 and self.job.world != spec.agents:
            raise ConfigError(
                f"{spec.source}: {spec.agents} agents but {self.job.world} processes; launch "
                f"with --nproc-per-node {spec.agents} (one agent per process)"
            )
        say = options.log if self.job.main else (lambda _: None)
        self.spec, self.out, self.say = spec, out, say
        self.options = options.but(log=say, progress=options.progress and self.job.main)
        check_memory(spec)  # before anything is built or written
        self.topology = spec.build_topology()
        self.graphs: dict[str, tuple[Any, DistributedCommunicator | None]] = {}
        self.built: dict[tuple[int, ...] | None, Any] = {}
        self.store = ResultStore(
            out / "runs", force=options.force, writer=self.job.main, barrier=self.barrier
        )
        keep_freed_memory()

    def barrier(self) -> None:
        self.job.barrier(self.spec.timeout)

    def graph_for(self, label: str) -> tuple[Any, DistributedCommunicator | None]:
        """The variant's graph and, under torchrun, the communicator over it."""
        key = json.dumps(self.spec.topology_of(label), sort_keys=True, default=repr)
        if key not in self.graphs:  # the shared table's graph is the one built at the start
            shared_table = self.spec.topology_of(label) == self.spec.topology
            network = self.topology if shared_table else self.spec.build_topology(label)
            world = self.job.world > 1
            shared = DistributedCommunicator(network, timeout=self.spec.timeout) if world else None
            self.graphs[key] = (network, shared)
        return self.graphs[key]

    def problem_for(self, group: tuple[int, ...] | None) -> Any:
        """The problem of the runs ``group`` (``None``: one batched problem for all)."""
        if group is None and group in self.built:  # a batched problem serves every variant
            return self.built[group]
        spec, t0 = self.spec, time.perf_counter()
        try:
            problem = spec.build_problem(group, self.job.rank if self.job.world > 1 else None)
        except (MemoryError, RuntimeError) as exc:  # the allocator refused
            if "alloc" not in str(exc).lower() and not isinstance(exc, MemoryError):
                raise
            raise ConfigError(
                f"{spec.source}: the problem does not fit in memory ({str(exc).splitlines()[0]}); "
                "lower runs, agents or the problem's sizes in [problem_params]"
            ) from None
        took = time.perf_counter() - t0
        self.say(f"{spec.name}: {problem!r} on {self.topology!r} (built in {took:.1f} s)")
        self.built[group] = problem
        return problem

    def communicator(self, label: str, run: int | None, problem: Any) -> Any:
        network, shared = self.graph_for(label)
        if shared is not None:  # every unit starts at round 0 (schedules, counts, seeds)
            shared.stats.reset()
        comm = shared or SimulatedCommunicator(network)
        if shared is not None:
            shared.check_consistency(extra=f"{label}:{run}:{problem.dim}")
        return comm

    def compute(self, variant: Variant, group: tuple[int, ...] | None, folder: Path) -> tuple:
        """One unit: the variant on the runs ``group``; its rows and facts for the store."""
        spec, kind = self.spec, self.spec.params
        problem = self.problem_for(group)
        run = None if group is None else group[0]
        comm = self.communicator(variant.label, run, problem)
        plan = kind.plan(problem, spec.iterations, spec.record_points)
        alg = variant.make()
        alg = alg.with_hyperparams(lr=kind.step_size(alg.lr, problem))
        noise = spec.seeds.noise + (run or 0)
        labels = kind.columns(problem)
        if run is not None:  # runs of a group are numbered from its first
            labels = [c | {"run": run + c.get("run", 0)} for c in labels]
        options = self.options.but(
            seed=noise,
            threads=spec.threads,
            checkpoint_dir=folder if plan.period else None,
            checkpoint_every=spec.checkpoint_every,
            checkpoint_minutes=spec.checkpoint_minutes,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1000 + noise + 7919 * self.job.rank)  # dropout, per agent
            result = run_loop(alg, problem, comm, plan, options, labels=labels)
        result.algorithm = variant.label
        n_div = int(result.diverged.sum())
        diverged = f", {n_div} diverged" if n_div else ""
        self.say(f"  {unit_name(variant.label, group):14s} {result.wall_time:7.2f} s{diverged}")
        facts = {"seconds": result.wall_time, "diverged": n_div, "gossip_rounds": comm.stats.rounds}
        if isinstance(problem, NeuralProblem | BatchedRuns):  # the rule's choice, on record
            facts["backend"] = problem.backend
        return result.rows, facts

    def units(self) -> list[tuple[Unit, Variant, tuple[int, ...] | None]]:
        """Every unit in order: per group of runs, per variant."""
        spec, units = self.spec, []
        for group in _run_groups(spec):
            run = None if group is None else group[0]
            for variant in spec.algorithms.values():
                info = {"algorithm": variant.label, "method": variant.method, "run": run}
                if group is not None and len(group) > 1:
                    info["runs"] = list(group)
                info["hyperparams"] = variant.hyperparams
                if variant.topology is not None:
                    info["topology"] = variant.topology
                folder = unit_folder(unit_name(variant.label, group))
                if folder in {u.name for u, _, _ in units}:
                    raise ConfigError(
                        f"{spec.source}: two algorithm variants would share the result folder "
                        f"{folder!r}; give them labels that differ in letters or digits"
                    )
                unit = Unit(folder, spec.fingerprint(variant.label, run), info)
                units.append((unit, variant, group))
        return units

    def in_parallel(self, units: list) -> dict[str, list[dict[str, Any]]]:
        """The units stored intact, and the pending ones computed by ``jobs`` workers, by name
        (the rest: computed one after the other by :meth:`run`): the units of a batched sweep,
        or of a kind whose units over runs fork (as many workers as their problems fit in
        memory)."""
        finished: dict[str, list[dict[str, Any]]] = {}  # stored by the workers' parent

        def keep(unit: Unit, result: tuple[list, dict]) -> None:
            finished[unit.name] = self.store.record(unit, *result)

        groups, jobs = _run_groups(self.spec), self.options.jobs
        parallel = self.job.world == 1 and (groups == [None] or self.spec.params.forkable)
        if groups != [None] and (free := available_memory()) is not None:  # one problem each
            need = MEMORY_MARGIN * sum(memory_parts(self.spec).values())
            jobs = min(jobs, int(free // need))
        if jobs > 1 and parallel:
            pending = []
            for unit in units:  # a stored unit is read once: kept here, not read again
                with warnings.catch_warnings():  # the store warns about a corrupt unit when run
                    warnings.simplefilter("ignore")
                    rows = None if self.options.force else self.store.stored(unit[0])
                if rows is None:
                    pending.append(unit)
                else:
                    finished[unit[0].name] = rows
                    self.store.kept.append(unit[0].name)
            if len(pending) > 1:  # each worker computes its units in their folders

                def compute(unit: Unit, variant: Variant, group: tuple[int, ...] | None) -> tuple:
                    return self.compute(variant, group, self.store.prepare(unit))

                build = functools.partial(self.problem_for, groups[0])
                _in_workers(jobs, pending, compute, build, keep, self.say)
        return finished

    def run(self) -> Outcome:
        """Every unit computed or resumed; all rows, also in ``OUT/results.csv``."""
        # one run writes a folder at a time; stale temporary files of killed writes go
        with lock_folder(self.out) if self.job.main else contextlib.nullcontext():
            rows: list[dict[str, Any]] = []
            units = self.units()
            finished = self.in_parallel(units)
            for unit, variant, group in units:
                if unit.name in finished:
                    rows += finished[unit.name]
                    continue
                compute = lambda folder, v=variant, g=group: self.compute(v, g, folder)  # noqa: E731
                rows += self.store.cached(unit, compute)
        store = self.store
        if store.kept:
            self.say(f"resumed: {len(store.kept)} finished unit(s) kept ({', '.join(store.kept)})")
        for row in rows:  # the network model is presentation: applied to stored rows too
            row["model_time"] = self.spec.network.seconds(
                row["step"], row["busiest_messages"], row["busiest_bytes"]
            )
        if self.spec.timing is not None:  # so is the time model: its clock is the modelled time
            clock_rows(
                rows,
                self.spec.timing,
                lambda a: self.graph_for(a)[0],
                lambda a: self.spec.algorithms[a].make(),
            )
            for row in rows:
                row["model_time"] = row["sim_time"]
        if self.job.main:
            write_csv_atomic(self.out / "results.csv", rows)
        self.barrier()
        return Outcome(rows, store.ran, store.kept, time.perf_counter() - self.start, self.job.main)
