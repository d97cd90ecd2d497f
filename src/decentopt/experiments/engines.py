"""Cluster engines for sweeps: SLURM through submitit, dask.distributed; optional extras.

``decentopt run SPEC --executor slurm`` submits the pending units as one SLURM
array job through `submitit <https://github.com/facebookincubator/submitit>`_; the
specification's ``[executor]`` table (or ``--set executor.KEY=VALUE``) holds its
resources, passed to submitit's ``update_parameters`` (``partition``, ``time`` in
minutes, ``cpus_per_task``, ``gpus_per_node``, ``mem_gb``, ``array_parallelism``,
...), plus ``folder`` (the jobs' logs; default ``OUT/slurm``), ``cluster``
(``"slurm"``; ``"local"`` runs the jobs as local processes, ``"debug"`` in this
one) and ``poll`` (seconds between looks at the jobs' states). A unit pre-empted or
timed out is requeued by submitit and resumes from its checkpoints in the store.

``--executor dask`` runs the units on a dask.distributed cluster: ``address`` (a
scheduler's, e.g. ``"tcp://head:8786"``), or else a ``LocalCluster`` of
``workers`` processes with one thread each (``--jobs N`` where given, else the table's
``workers``, else ``--jobs``' default, the cores).

Every engine computes each unit under its lease in the shared store, so a unit is
computed once however many jobs or hosts try. Any other
``concurrent.futures.Executor`` can be passed to
:func:`~decentopt.experiments.runner.run_spec` itself (Ray's, a thread pool, ...).
Each engine is an extra: ``pip install decentopt[slurm]``, ``decentopt[dask]``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decentopt.experiments.execution import Engine, UnitFailed, WorkerLost
from decentopt.experiments.spec import ConfigError, RunSpec
from decentopt.integrations.loggers.base import needs

__all__ = ["ENGINES", "SubmititExecutor", "make"]

#: Seconds between looks at the states of submitted jobs (``sacct`` on SLURM).
POLL = 5.0


@dataclass
class SubmititExecutor(Executor):
    """A submitit executor as a ``concurrent.futures.Executor``: every call one job (or
    one task of an array job, :meth:`submit_all`), its future set when the job ends."""

    executor: Any  # submitit.SlurmExecutor, LocalExecutor or DebugExecutor
    uncompleted: type[BaseException]  # submitit's error of a job that ended without a result
    failed: type[BaseException]  # submitit's error of a job whose function raised (checked first:
    # it is a kind of ``uncompleted``)
    poll: float = POLL
    jobs: list[tuple[Any, Future]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._watcher = threading.Thread(target=self._watch, name="decentopt-jobs", daemon=True)
        self._watcher.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return self._track([self.executor.submit(fn, *args, **kwargs)])[0]

    def submit_all(self, calls: list[Callable[[], Any]]) -> list[Future]:
        """Every call as one task of an array job (a single job when there is one)."""
        with self.executor.batch():
            jobs = [self.executor.submit(call) for call in calls]
        return self._track(jobs)

    def _track(self, jobs: list[Any]) -> list[Future]:
        futures: list[Future] = [Future() for _ in jobs]
        for future in futures:
            future.set_running_or_notify_cancel()
        with self._lock:
            self.jobs += zip(jobs, futures, strict=True)
        return futures

    def _watch(self) -> None:
        while not self._stop.wait(self.poll):
            self.check()

    def check(self) -> None:
        """Set the futures of the jobs that ended."""
        with self._lock:
            watched = list(self.jobs)
        for job, future in watched:
            if future.done() or not job.done():
                continue
            try:
                future.set_result(job.result())
            except self.failed as exc:  # the unit's own error: the line of its traceback that
                # says what was raised (the whole traceback is in the log)
                lines = [line.strip() for line in str(exc).splitlines()]
                raised = [x for x in lines if re.match(r"[A-Za-z_][\w.]*(Error|Exception)\b", x)]
                what = f"a unit's job failed: {raised[-1] if raised else lines[0]}"
                future.set_exception(UnitFailed(f"{what}; its log: {job.paths.stderr}"))
            except self.uncompleted:  # killed, pre-empted for good, out of memory
                why = f"its job {job.job_id} ended without a result ({job.state.lower()})"
                future.set_exception(WorkerLost(why))
            except BaseException as exc:
                future.set_exception(exc)
            with self._lock:
                self.jobs.remove((job, future))

    def stop(self) -> None:
        """Cancel every job not finished (Ctrl-C): its unit resumes from its checkpoints."""
        with self._lock:
            watched = list(self.jobs)
        for job, future in watched:
            if not future.done():  # (a running future cannot be cancelled)
                job.cancel(check=False)
        self.shutdown(wait=False)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._stop.set()
        if wait:
            self._watcher.join()


def _slurm(settings: dict[str, Any], out: Path, jobs: int) -> Engine:
    submitit = needs("submitit", "slurm", "--executor slurm")  # imported only when asked for
    folder = Path(settings.pop("folder", out / "slurm"))
    poll = float(settings.pop("poll", POLL))
    cluster = settings.pop("cluster", "slurm")
    kinds = {
        "slurm": submitit.SlurmExecutor,
        "local": submitit.LocalExecutor,
        "debug": submitit.DebugExecutor,
    }
    if cluster not in kinds:
        raise ConfigError(f"[executor] cluster = {cluster!r}: use one of {', '.join(kinds)}")
    timeouts = settings.pop("max_num_timeout", None)
    extra = {} if timeouts is None or cluster == "debug" else {"max_num_timeout": int(timeouts)}
    executor = kinds[cluster](folder=folder, **extra)
    settings.setdefault("job_name", out.name or "decentopt")
    if cluster == "slurm":
        settings.setdefault("signal_delay_s", 120)  # time to requeue before the limit
    try:
        executor.update_parameters(**settings)
    except (ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(
            f"[executor] of --executor slurm: {first}; submitit's SlurmExecutor takes "
            "partition, time, cpus_per_task, gpus_per_node, mem_gb, array_parallelism, ..."
        ) from None
    errors = submitit.core.utils
    pool = SubmititExecutor(executor, errors.UncompletedJobError, errors.FailedJobError, poll)
    return Engine(pool, stop=pool.stop, close=pool.shutdown, submit_all=pool.submit_all)


def _dask(settings: dict[str, Any], out: Path, jobs: int) -> Engine:
    distributed = needs("distributed", "dask", "--executor dask")  # imported only when asked for
    address = settings.pop("address", None)
    workers = settings.pop("workers", jobs)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(
            f"[executor] workers = {workers!r}: give the local cluster's worker processes as "
            "a whole number >= 1 (or --jobs N)"
        )
    if settings:
        raise ConfigError(
            f"[executor] of --executor dask: unknown key(s) {', '.join(sorted(settings))}; "
            "it takes address (a scheduler's) or workers (of a local cluster)"
        )
    cluster = None
    if address is None:
        cluster = distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
    client = distributed.Client(str(address) if cluster is None else cluster)
    executor = client.get_executor(pure=False)

    def close() -> None:
        executor.shutdown(wait=False)
        client.close()
        if cluster is not None:
            cluster.close()

    return Engine(
        executor,
        lost=(distributed.KilledWorker, WorkerLost),
        stop=close,
        close=close,
    )


#: Engines by name (``--executor NAME``), each made from its ``[executor]`` settings (a
#: copy of its own), the output folder and ``jobs`` (the local processes asked for: a local
#: dask cluster's workers); local forked workers are the runner's own.
ENGINES: dict[str, Callable[[dict[str, Any], Path, int], Engine]] = {
    "slurm": _slurm,
    "dask": _dask,
}


def make(name: str, spec: RunSpec, out: Path, jobs: int = 1) -> Engine:
    """The engine ``name``, set up by the specification's ``[executor]`` table; ``jobs``:
    the workers of a local dask cluster whose table names none."""
    if name not in ENGINES:
        raise ConfigError(f"--executor {name}: use one of local, {', '.join(ENGINES)}")
    settings = {k: v for k, v in spec.executor.items() if k != "name"}
    return ENGINES[name](settings, out, jobs)
