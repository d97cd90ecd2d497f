"""The units of one specification: how they are planned and what they compute.

A unit is one algorithm variant with all its runs and panel levels batched into the
columns of one problem (convex kinds), or one variant on one group of runs (kinds
whose runs are units of their own, such as neural training). Every unit is planned,
named and checked before anything is built or written.

Every variant sees the same problem, graph and noise; a graph is built once per
distinct table (and, under torchrun, its communicator made in the same order on
every rank: units run in order), a batched problem once for every variant. The
store and where the units run are the runner's (:mod:`~decentopt.experiments.runner`).

Under torchrun (or ``decentopt launch -n N``) the ``agents`` of the specification are
spread over the ``N`` processes, ``k = agents / N`` each: rank ``r`` holds agents
``r k ... r k + k - 1`` of the problem and gossips through a
:class:`~decentopt.comm.DistributedCommunicator` (``k = 1``) or a
:class:`~decentopt.comm.ManyAgentCommunicator` (``k > 1``); the rows are the
simulator's, to rounding.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import torch

from decentopt.comm.distributed import DistributedCommunicator
from decentopt.comm.many import ManyAgentCommunicator
from decentopt.distributed import launch, runtime
from decentopt.distributed.checkpoint import latest_checkpoint
from decentopt.driver import RunOptions, run_loop
from decentopt.driver.timeline import pace, simulated_communicator
from decentopt.experiments.spec import ConfigError, RunSpec, Variant
from decentopt.experiments.store import Unit
from decentopt.perf import MEMORY_MARGIN, available_memory, gib
from decentopt.plan import TAIL_POINTS
from decentopt.problems.neural import BatchedRuns, NeuralProblem
from decentopt.topology.footprint import build_bytes

__all__ = [
    "UNIT_DTYPE",
    "Planned",
    "Units",
    "check_memory",
    "memory_parts",
    "plan_units",
    "run_groups",
    "unit_dtype",
    "unit_name",
]

#: Bytes a result row takes in memory, through the report (measured: 1.6 KB on a grid of
#: 47 variants).
ROW_BYTES = 1600
#: A figure panel of the report while it is drawn and saved (its curves are bounded:
#: plotting.MOST_CURVES; measured: a grid of 1,000 variants peaks at 427 MB in all).
FIGURE_BYTES = 32 << 20
#: What a run loads and holds besides its problem: plotting, reports, buffers (measured:
#: 55 MB above the import of the package for the smallest sweeps).
RUN_OVERHEAD = 64 << 20


class Planned(NamedTuple):
    """One unit of a sweep: its store entry, its variant and its runs (None: all)."""

    unit: Unit
    variant: Variant
    group: tuple[int, ...] | None


def run_groups(spec: RunSpec) -> list[tuple[int, ...] | None]:
    """The units over runs: ``[None]`` (all runs as columns of one problem) or groups."""
    kind = spec.params
    return [None] if kind.batch_runs else list(kind.run_groups(spec.runs, spec.agents))


def unit_name(label: str, group: tuple[int, ...] | None) -> str:
    """A unit's name: the variant's label, and its runs when they are units of their own."""
    if group is None:
        return label
    return f"{label}-run{group[0]}" if len(group) == 1 else f"{label}-runs{group[0]}-{group[-1]}"


def unit_folder(name: str) -> str:
    """The folder name of a unit: its name with anything but ``\\w . = ( ) , + -`` as ``_``;
    a name too long for a file system (255 bytes) is cut, with a digest of the whole."""
    folder = re.sub(r"[^\w.=(),+-]", "_", name)
    if len(folder.encode()) <= 200:
        return folder
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return folder.encode()[:160].decode(errors="ignore") + "-" + digest


def plan_units(spec: RunSpec) -> list[Planned]:
    """Every unit in order: per group of runs, per variant."""
    units: list[Planned] = []
    for group in run_groups(spec):
        run = None if group is None else group[0]
        for variant in spec.algorithms.values():
            info: dict[str, Any] = {
                "algorithm": variant.label,
                "method": variant.method,
                "run": run,
            }
            if group is not None and len(group) > 1:
                info["runs"] = list(group)
            info["hyperparams"] = variant.hyperparams
            if variant.topology is not None:
                info["topology"] = variant.topology
            folder = unit_folder(unit_name(variant.label, group))
            if folder in {planned.unit.name for planned in units}:
                raise ConfigError(
                    f"{spec.source}: two algorithm variants would share the result folder "
                    f"{folder!r}; give them labels that differ in letters or digits"
                )
            unit = Unit(folder, spec.fingerprint(variant.label, run), info)
            units.append(Planned(unit, variant, group))
    return units


def memory_parts(spec: RunSpec) -> dict[str, float]:
    """About how many bytes a run holds beyond what the process holds already, by part."""
    runs = max(spec.runs if g is None else len(g) for g in run_groups(spec))
    parts = dict(spec.params.memory_bytes(agents=spec.agents, runs=runs))
    methods = [v.make() for v in spec.algorithms.values()]
    iterate = spec.params.iterate_bytes(agents=spec.agents, runs=runs)
    # a delayed gossip keeps tau rounds of each tensor it sends (tau: its delay, or its
    # staleness bound): tau copies of the iterates or more, for its largest variant
    copies = max(pace(m)[0] * max(1, len(m.sends or ())) for m in methods)
    parts["delayed gossip's messages of past rounds"] = copies * iterate
    outer = any(m.outer is not None for m in methods)
    parts["an outer optimizer's x_sync and momentum"] = 2 * iterate if outer else 0.0
    levels = len(getattr(spec.params, spec.panel)) if spec.panel else 1
    records = spec.record_points + TAIL_POINTS + 2  # a log grid's points at most
    rows = len(spec.algorithms) * spec.runs * levels * records
    parts["result rows and their report"] = rows * ROW_BYTES
    parts["libraries and buffers of a run"] = RUN_OVERHEAD
    parts["figures of the report"] = FIGURE_BYTES * levels
    tables = {json.dumps(t, sort_keys=True): t for t in map(spec.topology_of, spec.algorithms)}
    parts["graphs"] = sum(build_bytes(t["name"], spec.agents, t) for t in tables.values())
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
            "available; lower runs, agents, record_points, the grids of [algorithms], a "
            "delayed gossip's tau or the sizes in [problem_params]"
        )
    return need


def parallel_jobs(specs: list[RunSpec], jobs: int) -> int:
    """How many problems of ``specs`` (the largest counted) fit in memory together, from 1 to
    ``jobs``: the units that build a problem each, or the sweeps, that may compute at once."""
    free = available_memory()
    need = max(MEMORY_MARGIN * sum(memory_parts(s).values()) for s in specs)
    return jobs if free is None else max(1, min(jobs, int(free // need)))


#: torch's default dtype while a unit is built and computed, wherever it runs (this
#: process, a forked worker, a SLURM job, a dask worker, a rank of torchrun): what tensors
#: made without a dtype take (gradient noise drawn in float32, models initialised before
#: they are cast to ``problem_params.dtype``). torch's own default, so a unit's rows never
#: depend on a default the submitting process or a worker changed.
UNIT_DTYPE = torch.float32


_DTYPE_LOCK = threading.Lock()
#: Units being built or computed in this process (threads of an executor), and torch's
#: default dtype before the first of them began: restored when the last one ends.
_ACTIVE: list[Any] = [0, None]


@contextmanager
def unit_dtype() -> Iterator[None]:
    """Build or compute a unit with :data:`UNIT_DTYPE` as torch's default dtype (process-wide:
    units computed by threads of one process share it), then restore the caller's."""
    with _DTYPE_LOCK:
        if _ACTIVE[0] == 0:
            _ACTIVE[1] = torch.get_default_dtype()
            torch.set_default_dtype(UNIT_DTYPE)
        _ACTIVE[0] += 1
    try:
        yield
    finally:
        with _DTYPE_LOCK:
            _ACTIVE[0] -= 1
            if _ACTIVE[0] == 0:
                torch.set_default_dtype(_ACTIVE[1])


class Units:
    """The graphs, problems and runs of the units of ``spec`` in this process (one agent
    of each under torchrun, where ``job`` is its process group)."""

    def __init__(self, spec: RunSpec, options: RunOptions) -> None:
        self.job = runtime.job(spec.timeout)
        world = self.job.world
        if world > 1 and spec.agents % world:
            more = world * -(-spec.agents // world)
            fits = ", ".join(str(n) for n in range(1, spec.agents + 1) if spec.agents % n == 0)
            raise ConfigError(
                f"{spec.source}: {spec.agents} agents on {world} processes: every process holds "
                f"as many agents, so agents must be a multiple of the processes; set agents = "
                f"{more} (--set agents={more}) or start it with "
                f"{launch.processes_flag(spec.agents)} (processes that divide {spec.agents}: "
                f"{fits})"
            )
        if world > 1 and int(os.environ.get("DECENTOPT_PROCS_PER_AGENT") or 1) > 1:
            raise ConfigError(
                f"{spec.source}: a sweep places its agents on the processes itself (agents / "
                "processes each); --procs-per-agent is for training scripts: drop it"
            )
        #: the agents of each process (torchrun: ``agents / processes``; alone: all of them)
        self.per_process = spec.agents // world
        self.spec = spec
        self.say = options.log if self.job.main else (lambda _: None)
        self.options = options.but(log=self.say, progress=options.progress and self.job.main)
        self.topology = spec.build_topology()
        self.graphs: dict[str, tuple[Any, Any]] = {}
        self.built: dict[tuple[int, ...] | None, Any] = {}

    def barrier(self) -> None:
        self.job.barrier(self.spec.timeout)

    def graph_for(self, label: str) -> tuple[Any, Any]:
        """The variant's graph and, under torchrun, the communicator over it."""
        key = json.dumps(self.spec.topology_of(label), sort_keys=True, default=repr)
        if key not in self.graphs:  # each graph is built once (spec's _built)
            network = self.spec.build_topology(label)
            shared = None
            if self.job.world > 1:  # one agent per process, or several
                kind = DistributedCommunicator if self.per_process == 1 else ManyAgentCommunicator
                shared = kind(network, timeout=self.spec.timeout)
            self.graphs[key] = (network, shared)
        return self.graphs[key]

    def mine(self) -> int | range | None:
        """The agents of this process, as a kind's ``build`` takes them: ``None`` (all of
        them, the simulator), this rank (one agent per process) or a range of agents."""
        if self.job.world == 1:
            return None
        k = self.per_process
        return self.job.rank if k == 1 else range(self.job.rank * k, self.job.rank * k + k)

    def problem_for(self, group: tuple[int, ...] | None) -> Any:
        """The problem of the runs ``group`` (``None``: one batched problem for all)."""
        if group is None and group in self.built:  # a batched problem serves every variant
            return self.built[group]
        spec = self.spec
        t0 = time.perf_counter()
        try:
            with unit_dtype():
                problem = spec.build_problem(group, self.mine())
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

    def compute(self, variant: Variant, group: tuple[int, ...] | None, folder: Path) -> tuple:
        """One unit: the variant on the runs ``group``; its rows and facts for the store."""
        spec = self.spec
        kind = spec.params
        problem = self.problem_for(group)
        run = None if group is None else group[0]
        alg = variant.make()
        network, comm = self.graph_for(variant.label)
        if comm is not None:  # torchrun: every unit starts at round 0 (schedules, counts, seeds)
            comm.stats.reset()
            comm.check_consistency(extra=f"{variant.label}:{run}:{problem.dim}")
        else:  # under a time model, bounded staleness mixes the messages of the ages it gives
            comm = simulated_communicator(alg, network, spec.timing, spec.iterations)
        plan = kind.plan(problem, spec.iterations, spec.record_points)
        alg = alg.with_hyperparams(lr=kind.step_size(alg.lr, problem))
        noise = spec.seeds.noise + (run or 0)
        labels = kind.columns(problem)
        if run is not None:  # runs of a group are numbered from its first
            labels = [c | {"run": run + c.get("run", 0)} for c in labels]
        options = self.options.but(
            seed=noise,
            threads=spec.threads,
            checkpoint_dir=folder if plan.period or spec.checkpoint_every else None,
            checkpoint_every=spec.checkpoint_every,
            checkpoint_minutes=spec.checkpoint_minutes,
            monitor=self.options.monitor and self.options.monitor.unit(spec, variant, run, folder),
        )
        # the newest checkpoint when the unit starts: where it resumes (0: from the start)
        resumed_from = (latest_checkpoint(folder) if options.checkpoint_dir else None) or 0
        with torch.random.fork_rng(devices=[]), unit_dtype():
            torch.manual_seed(1000 + noise + 7919 * self.job.rank)  # dropout, per agent
            result = run_loop(alg, problem, comm, plan, options, labels=labels)
        result.algorithm = variant.label
        n_div = int(result.diverged.sum())
        diverged = f", {n_div} diverged" if n_div else ""
        self.say(f"  {unit_name(variant.label, group):14s} {result.wall_time:7.2f} s{diverged}")
        facts = {"seconds": result.wall_time, "diverged": n_div, "gossip_rounds": comm.stats.rounds}
        facts["resumed_from"] = resumed_from
        if isinstance(problem, NeuralProblem | BatchedRuns):  # the rule's choice, on record
            facts["backend"] = problem.backend
        return result.rows, facts
