"""Run a specification: every unit of work through the store and the one loop.

The units are planned and computed by :mod:`~decentopt.experiments.units`; every
algorithm sees the same problem, graph and noise (seeds by role).
Each unit is computed under its lease in the store
(:meth:`~decentopt.experiments.store.ResultStore.claimed`), so an
interrupted sweep resumes, a changed setting reruns only what it affects, nothing
corrupt is trusted and no two processes (or hosts) compute a unit at once.

The units run one after the other, in ``--jobs`` forked workers
(:mod:`~decentopt.experiments.execution`), or on a cluster engine
(:mod:`~decentopt.experiments.engines`: SLURM through submitit, dask, or any
``concurrent.futures.Executor``). Under ``torchrun`` every process holds its share
of the agents, gossips with its neighbours, the units run in order, and rank 0 writes
the results.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from decentopt import plugins
from decentopt.driver import RunOptions, intra_op_threads
from decentopt.driver.timeline import clock_rows
from decentopt.experiments import engines, execution
from decentopt.experiments.execution import Engine, ForkPool, forked_map, run_tasks, say_line
from decentopt.experiments.spec import ConfigError, RunSpec
from decentopt.experiments.store import Claimed, ResultStore
from decentopt.experiments.units import (
    Units,
    check_memory,
    memory_parts,
    parallel_jobs,
    plan_units,
    run_groups,
)
from decentopt.integrations import loggers
from decentopt.perf import keep_freed_memory
from decentopt.results import lock_folder, write_csv_atomic

__all__ = [
    "Outcome",
    "Sweep",
    "UnitTask",
    "check_memory",
    "forked_map",
    "memory_parts",
    "run_spec",
    "say_line",
]

#: The sweeps this process computes units of, by output folder: a forked worker inherits
#: its parent's, problem and data built; another process builds its own once.
_SWEEPS: dict[str, Sweep] = {}


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
    executor: str | Executor | None = None,
) -> Outcome:
    """Run (or resume) every unit of ``spec``; all rows are also written to ``OUT/results.csv``.

    ``jobs > 1`` computes the units in that many forked worker processes, one thread
    each; ``executor`` runs them on an engine instead: ``"slurm"``, ``"dask"`` (set up
    by the specification's ``[executor]`` table) or any ``concurrent.futures.Executor``.
    The results are those of a serial run.
    """
    options = RunOptions(force=force, progress=progress, jobs=jobs, log=log)
    return Sweep(spec, Path(out), options, executor=executor).run()


@dataclass(frozen=True)
class UnitTask:
    """One unit of a sweep as any executor runs it: picklable, self-contained. In the
    process that runs it, the sweep is built once (or inherited from a forking parent),
    and the unit computed under its lease; returns :class:`~.store.Claimed`."""

    spec: RunSpec
    out: str
    index: int
    #: users' methods loaded where the task is made, loaded again where it runs
    plugins: tuple[str, ...] = field(default_factory=lambda: tuple(plugins.loaded()))
    #: the loggers of the sweep (``NAME:TARGET``), made again where the unit runs
    log: tuple[str, ...] = ()

    def __call__(self) -> Claimed:
        for plugin in self.plugins:  # once per process; a forked worker has them already
            plugins.load(plugin)
        sweep = _SWEEPS.get(self.out)
        if sweep is None or replace(sweep.spec, claims=()) != self.spec:  # another sweep
            monitor = loggers.make(self.log) if self.log else None
            options = RunOptions(progress=False, log=say_line, monitor=monitor)
            sweep = Sweep(self.spec, Path(self.out), options)
            _SWEEPS[self.out] = sweep
        return sweep.compute_unit(self.index)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Under submitit: a unit pre-empted or timed out is requeued as it is, and
        resumes from its own checkpoints in the store."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)


class Sweep(Units):
    """The units of one specification, computed or resumed through the store: here one
    after the other, in forked workers or on an engine (see the module docstring)."""

    def __init__(
        self,
        spec: RunSpec,
        out: Path,
        options: RunOptions,
        *,
        executor: str | Executor | None = None,
    ) -> None:
        self.start = time.perf_counter()
        check_memory(spec)  # before anything is built or written
        super().__init__(spec, options)
        self.out = out
        self.executor = executor or spec.executor.get("name", "local")
        if self.job.world > 1 and self.executor != "local":  # no engine, no leases: see run()
            label = self.executor if isinstance(self.executor, str) else type(executor).__name__
            raise ConfigError(
                f"{spec.source}: --executor {label} under torchrun: its {self.job.world} "
                f"processes compute each unit together, one unit after the other; run it "
                f"without torchrun to hand its units to {label}, or give --executor local"
            )
        self.planned = plan_units(spec)
        self.store = ResultStore(
            out / "runs", force=options.force, writer=self.job.main, barrier=self.barrier
        )
        keep_freed_memory()

    def compute_unit(self, index: int) -> Claimed:
        """The unit ``index`` of the plan, in the process that computes it: where a unit
        starts and ends. Computed under its lease, or taken as stored. Under torchrun the
        ranks of a unit compute it together, so a lease per process would mean nothing (the
        folder lock keeps another run of this host out); rank 0 writes it."""
        planned = self.planned[index]
        work = functools.partial(self.compute, planned.variant, planned.group)
        return self.store.claimed(planned.unit, work, lease=self.job.world == 1)

    def stored_units(self) -> dict[int, list[dict[str, Any]]]:
        """The units stored intact for these settings, by index (each read once)."""
        if self.options.force:  # the store warns about a corrupt unit when it is run
            return {}
        found = {i: self.store.stored(p.unit, warn=False) for i, p in enumerate(self.planned)}
        return {index: rows for index, rows in found.items() if rows is not None}

    def engine(self, pending: int) -> Engine | None:
        """What computes the pending units: None (this process, one after the other), the
        caller's executor, a named engine, or ``jobs`` forked workers."""
        if isinstance(self.executor, Executor):  # the caller's: cancelled, never shut down
            return Engine(self.executor)
        if self.executor != "local":
            return engines.make(self.executor, self.spec, self.out, self.options.jobs)
        groups = run_groups(self.spec)
        forkable = groups == [None] or self.spec.params.forkable
        jobs = min(self.options.jobs, pending)
        if groups != [None]:  # units building a problem each: as many as fit in memory
            jobs = parallel_jobs([self.spec], jobs)
        if jobs < 2 or not forkable or self.job.world > 1:  # torchrun: units in order
            return None
        self.problem_for(groups[0])  # what every worker inherits (the problem, or the data)
        _SWEEPS[str(self.out)] = self
        pool = ForkPool(jobs)
        return Engine(pool, stop=pool.stop, close=pool.shutdown)

    def run_units(self) -> list[dict[str, Any]]:
        """Every unit stored, or computed by the engine; their rows in the plan's order."""
        rows = self.stored_units()
        names = [p.unit.name for p in self.planned]
        progress = execution.Progress(self.say, len(self.planned))
        progress.reused([names[i] for i in sorted(rows)])
        self.store.kept += [names[i] for i in sorted(rows)]
        pending = [i for i in range(len(self.planned)) if i not in rows]

        def keep(at: int, claimed: Claimed) -> None:
            rows[pending[at]] = claimed.rows
            listed = self.store.ran if claimed.computed else self.store.kept
            listed.append(names[pending[at]])

        with intra_op_threads(1, 0):  # no thread pool may exist here when workers fork
            engine = self.engine(len(pending)) if pending else None
        if engine is None:  # the store lists them as ran or kept
            for index in pending:
                rows[index] = self.compute_unit(index).rows
        else:
            out = str(self.out)
            if self.options.force:  # emptied once, here: a requeued job then resumes
                for index in pending:
                    self.store.prepare(self.planned[index].unit)
            spec = replace(self.spec, claims=())  # what a unit needs, and all pickles
            log = self.options.monitor.targets if self.options.monitor else ()
            tasks = [UnitTask(spec, out, i, log=log) for i in pending]
            try:
                with intra_op_threads(1, 0):
                    run_tasks(engine, tasks, [names[i] for i in pending], keep, progress)
            finally:
                engine.close()
                _SWEEPS.pop(out, None)
            # a unit not kept was lost, or stored before its pool broke (a caller's
            # ProcessPoolExecutor fails every task it held): those are taken from the store
            for index in [i for i in pending if i not in rows]:
                found = self.store.stored(self.planned[index].unit)
                if found is not None:
                    rows[index] = found
                    self.store.ran.append(names[index])
            lost = [names[i] for i in pending if i not in rows]
            if lost:
                raise execution.WorkersLost(
                    f"{len(lost)} unit(s) not computed (their workers died): "
                    f"{', '.join(lost)}; the finished units are saved and a rerun computes the rest"
                )
        return [row for index in range(len(self.planned)) for row in rows[index]]

    def run(self) -> Outcome:
        """Every unit computed or resumed; all rows, also in ``OUT/results.csv``."""
        # one run writes a folder at a time; stale temporary files of killed writes go
        with lock_folder(self.out) if self.job.main else contextlib.nullcontext():
            rows = self.run_units()
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
        store = self.store
        return Outcome(rows, store.ran, store.kept, time.perf_counter() - self.start, self.job.main)
