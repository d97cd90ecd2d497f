"""Cluster engines: SLURM through submitit (its own test doubles), dask, any Executor."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import pytest

from decentopt.experiments import load_spec, run_spec
from decentopt.experiments.runner import UnitTask
from tests.experiments.test_spec import BASE, write
from tests.test_plugins import fresh_registry  # noqa: F401  (autouse: no plugin left behind)

#: Units that write checkpoints (every 2,000 steps), so that a killed one resumes.
LONG = BASE.replace("iterations = 50", "iterations = 20000\ncheckpoint_every = 2000")


def quiet(_: str) -> None:
    pass


def numbers(rows):  # everything but the timing columns (and the modelled time, presentation)
    return [{k: v for k, v in r.items() if "seconds" not in k and k != "model_time"} for r in rows]


@pytest.mark.parametrize("engine,extra", [("slurm", "slurm"), ("dask", "dask")])
def test_a_missing_engine_is_one_line_naming_its_extra(
    tmp_path, monkeypatch, capsys, engine, extra
):
    from decentopt.cli import main

    monkeypatch.setitem(sys.modules, "submitit", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "distributed", None)
    path = write(tmp_path, BASE)
    args = ["run", str(path), "--out", str(tmp_path / "o"), "--executor", engine]
    assert main([*args, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"pip install decentopt[{engine}]" in err


@pytest.mark.parametrize(
    "engine,setting,named",
    [
        ("slurm", 'executor.partion="gpu"', "partion"),
        ("slurm", 'executor.cluster="pbs"', "pbs"),
        ("dask", 'executor.adress="tcp://x:1"', "adress"),
    ],
)
def test_a_wrong_executor_table_is_one_line(tmp_path, capsys, engine, setting, named):
    from submitit.slurm.test_slurm import mocked_slurm

    from decentopt.cli import main

    path = write(tmp_path, BASE)
    args = ["run", str(path), "--out", str(tmp_path / "o"), "--executor", engine]
    with mocked_slurm():  # nothing is ever submitted
        assert main([*args, "--set", setting, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err and "[executor]" in err


def test_any_executor_runs_the_units_with_the_default_rows(tmp_path):
    spec = load_spec(write(tmp_path, BASE))
    default = run_spec(spec, tmp_path / "d", progress=False, log=quiet)
    with ThreadPoolExecutor(2) as pool:
        other = run_spec(spec, tmp_path / "t", progress=False, log=quiet, executor=pool)
    assert numbers(other.rows) == numbers(default.rows) and sorted(other.ran) == ["ed", "edm"]


@pytest.fixture
def job_signals():
    """What submitit's job start-up installs (USR2, SIGTERM, SIGCONT handlers), undone."""
    from submitit import JobEnvironment

    signals = (JobEnvironment._usr_sig(), signal.SIGTERM, signal.SIGCONT)
    saved = {sig: signal.getsignal(sig) for sig in signals}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _slurm_spec(tmp_path: Path, table: str):
    return load_spec(write(tmp_path, BASE + "[executor]\n" + table))


def test_slurm_submits_one_array_job_with_the_resources_of_its_table(tmp_path, job_signals):
    """Against submitit's mocked sbatch/sacct: one array job, the [executor] table's
    resources in its script, each task computing its unit; the rows of the default run."""
    from submitit.core import submission
    from submitit.slurm.test_slurm import mocked_slurm

    from decentopt.experiments import engines

    table = 'partition = "gpu"\ntime = 30\ncpus_per_task = 2\narray_parallelism = 2\npoll = 60\n'
    spec = _slurm_spec(tmp_path, table)
    default = run_spec(spec, tmp_path / "d", progress=False, log=quiet)
    out = tmp_path / "o"
    with mocked_slurm() as mock:
        engine = engines.make("slurm", spec, out)
        assert engine.submit_all is not None
        futures = engine.submit_all([UnitTask(spec, str(out), i) for i in range(2)])
        pool = engine.executor
        jobs = [job for job, _ in pool.jobs]
        assert [job.job_id for job in jobs] == ["12_0", "12_1"]
        script = (out / "slurm" / "12_submission.sh").read_text()
        for line in ("--array=0-1%2", "--partition=gpu", "--time=30", "--cpus-per-task=2"):
            assert f"#SBATCH {line}" in script
        for job in jobs:  # SLURM runs each task of the array
            with mock.job_context(job.job_id):
                submission.process_job(job.paths.folder)
        pool.check()
        rows = [row for future in futures for row in future.result(timeout=0).rows]
        engine.close()
    assert numbers(rows) == numbers(default.rows)


def test_a_unit_that_raises_in_its_slurm_job_is_one_line_with_its_log(tmp_path, job_signals):
    from submitit.core import submission
    from submitit.slurm.test_slurm import mocked_slurm

    from decentopt.experiments import engines
    from decentopt.experiments.execution import UnitFailed

    spec = _slurm_spec(tmp_path, "poll = 60\n")
    out = tmp_path / "o"
    with mocked_slurm() as mock:
        engine = engines.make("slurm", spec, out)
        [future] = engine.submit_all([UnitTask(spec, str(out), 7)])  # no unit 7: it raises
        [(job, _)] = engine.executor.jobs
        with mock.job_context(job.job_id), pytest.raises(IndexError):  # in the job
            submission.process_job(job.paths.folder)
        engine.executor.check()
        engine.close()
    error = future.exception(timeout=0)
    assert isinstance(error, UnitFailed) and len(str(error).splitlines()) == 1
    assert "failed: IndexError: list index out of range" in str(error)
    assert f"its log: {out / 'slurm'}" in str(error)


def test_a_unit_preempted_on_slurm_is_requeued_and_resumes_from_its_checkpoint(
    tmp_path, job_signals
):
    """Against submitit's doubles: SLURM warns the job (its USR2) mid-unit; submitit calls
    the unit's checkpoint() and requeues it, and the requeued job resumes from the unit's
    own checkpoint in the store: its rows are the default run's."""
    from unittest.mock import patch

    from submitit import JobEnvironment
    from submitit.core import submission
    from submitit.slurm.test_slurm import mocked_slurm

    from decentopt.experiments import engines

    spec = load_spec(write(tmp_path, LONG + "[executor]\npoll = 60\nmax_num_timeout = 1\n"))
    default = run_spec(spec, tmp_path / "d", progress=False, log=quiet)
    out = tmp_path / "o"
    folder = out / "runs" / "edm"
    usr = JobEnvironment._usr_sig()
    warned = threading.Event()

    def warn_once_checkpointed() -> None:  # SLURM's warning before pre-emption
        while not list(folder.glob("step-*/COMPLETE")):
            time.sleep(0.005)
        warned.set()
        signal.pthread_kill(threading.main_thread().ident, usr)

    requeue = "submitit.slurm.slurm.SlurmJobEnvironment._requeue"
    with mocked_slurm() as mock, patch(requeue) as requeued:
        engine = engines.make("slurm", spec, out)
        [future] = engine.submit_all([UnitTask(spec, str(out), 1)])  # the unit edm
        [(job, _)] = engine.executor.jobs
        threading.Thread(target=warn_once_checkpointed, daemon=True).start()
        with mock.job_context(job.job_id), pytest.raises(SystemExit):
            submission.process_job(job.paths.folder)  # its first run, pre-empted
        assert warned.is_set() and requeued.call_count == 1
        assert not (folder / "meta.json").exists() and not (folder / "lease").exists()
        with mock.job_context(job.job_id):  # the requeued job
            submission.process_job(job.paths.folder)
        engine.executor.check()
        rows = future.result(timeout=0).rows
        engine.close()
    assert numbers(rows) == [r for r in numbers(default.rows) if r["algorithm"] == "edm"]
    assert json.loads((folder / "meta.json").read_text())["resumed_from"] >= 2000


def _kill_mid_unit(out: Path, unit: str) -> threading.Thread:
    """Kill (SIGKILL) the process computing ``unit`` once it wrote a checkpoint."""

    def kill() -> None:
        lease = out / "runs" / unit / "lease"
        deadline = time.monotonic() + 300
        while not (lease.exists() and list(lease.parent.glob("step-*/COMPLETE"))):
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        os.kill(json.loads(lease.read_text())["pid"], signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def _logged_sweep(spec, out: Path, lines: Path, executor: str, log=quiet):
    """The sweep run on ``executor`` with a JSON-lines logger under ``lines``."""
    from decentopt.driver import RunOptions
    from decentopt.experiments.runner import Sweep
    from decentopt.integrations import loggers

    options = RunOptions(progress=False, log=log, monitor=loggers.make([f"jsonl:{lines}"]))
    return Sweep(spec, out, options, executor=executor).run()


def _each_step_logged_once(lines: Path, rows) -> None:
    """Every unit logged every recorded step once, from the worker that computed it (a
    resumed unit goes on from its checkpoint's step)."""
    steps = _logged(lines)
    assert set(steps) == {"ed", "edm"}
    recorded = sorted({r["step"] for r in rows})
    for unit in ("ed", "edm"):
        assert steps[unit] == recorded, unit


@pytest.mark.slow  # starts a job process per unit, one killed and run again
def test_submitit_local_jobs_write_the_default_rows_and_a_killed_unit_resumes(tmp_path):
    spec = load_spec(write(tmp_path, LONG + '[executor]\ncluster = "local"\npoll = 0.2\n'))
    default = run_spec(spec, tmp_path / "d", progress=False, log=quiet)
    out = tmp_path / "o"
    killer = _kill_mid_unit(out, "edm")
    lines: list[str] = []
    got = _logged_sweep(spec, out, tmp_path / "lines", "slurm", lines.append)
    killer.join()
    assert numbers(got.rows) == numbers(default.rows)
    lost = [line for line in lines if "ended without a result" in line]
    assert len(lost) == 1 and lost[0].split()[0] == "edm" and "computing it again" in lost[0]
    assert json.loads((out / "runs" / "edm" / "meta.json").read_text())["resumed_from"] >= 2000
    _each_step_logged_once(tmp_path / "lines", got.rows)


@pytest.mark.slow  # starts a local dask cluster; one of its workers is killed
def test_a_dask_local_cluster_writes_the_default_rows_and_a_killed_unit_resumes(tmp_path):
    spec = load_spec(write(tmp_path, LONG + "[executor]\nworkers = 2\n"))
    default = run_spec(spec, tmp_path / "d", progress=False, log=quiet)
    out = tmp_path / "o"
    killer = _kill_mid_unit(out, "edm")
    got = _logged_sweep(spec, out, tmp_path / "lines", "dask")
    killer.join()
    assert numbers(got.rows) == numbers(default.rows)
    assert json.loads((out / "runs" / "edm" / "meta.json").read_text())["resumed_from"] >= 2000
    _each_step_logged_once(tmp_path / "lines", got.rows)


@pytest.mark.slow  # a fresh interpreter
def test_a_unit_of_a_plugin_method_runs_in_a_fresh_process(tmp_path):
    """The users' methods loaded where the task is made are loaded where it runs."""
    import subprocess

    import cloudpickle

    from tests.test_plugins import NAME, SWEEP

    small = ["iterations=30", "runs=1", "agents=6"]
    spec = load_spec(SWEEP, quick=True, overrides=small)
    index = [v.method for v in spec.algorithms.values()].index(NAME)
    default = run_spec(spec, tmp_path / "d", progress=False, log=quiet)
    task = tmp_path / "task.pkl"
    task.write_bytes(cloudpickle.dumps(UnitTask(spec, str(tmp_path / "o"), index)))
    code = (
        "import pickle, sys, json; task = pickle.load(open(sys.argv[1], 'rb')); "
        "print(json.dumps(task().rows))"
    )
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(task)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.splitlines()[-1])
    label = list(spec.algorithms)[index]
    expected = [r for r in numbers(default.rows) if r["algorithm"] == label]
    assert numbers(rows) == json.loads(json.dumps(expected))


def test_a_study_refuses_an_engine_in_one_line(tmp_path, capsys):
    from decentopt.cli import main
    from decentopt.experiments.sources import PRESET_DIR, STUDIES

    study = PRESET_DIR / f"{STUDIES[0]}.toml"
    args = ["run", str(study), "--out", str(tmp_path / "o"), "--executor", "dask"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--executor dask: a study runs here" in err
    assert not (tmp_path / "o").exists()


def test_a_process_that_ran_units_of_other_settings_builds_the_new_ones(tmp_path):
    """A worker of a long-lived cluster keeps its sweep between tasks; a task of other
    settings on the same folder gets a sweep of its own."""
    from decentopt.experiments.runner import _SWEEPS

    path = write(tmp_path, BASE)
    out = str(tmp_path / "o")
    first = load_spec(path)
    second = load_spec(path, overrides=["algorithms.edm.beta=0.5"])
    try:
        UnitTask(first, out, 1)()
        rows = UnitTask(second, out, 1)().rows
    finally:
        _SWEEPS.pop(out, None)
    alone = run_spec(second, tmp_path / "alone", progress=False, log=quiet).rows
    assert numbers(rows) == [r for r in numbers(alone) if r["algorithm"] == "edm"]


def test_a_units_rows_do_not_depend_on_torchs_default_dtype(tmp_path):
    """The quadratic's noise is drawn in the default dtype: a unit computes under torch's
    own default (float32, a command line's) wherever it runs, whatever the caller set
    (these tests run under float64)."""
    import torch

    from decentopt.experiments.runner import _SWEEPS

    spec = load_spec(write(tmp_path, BASE))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        default = run_spec(spec, tmp_path / "d", progress=False, log=quiet)
    finally:
        torch.set_default_dtype(previous)
    assert previous == torch.float64
    here = run_spec(spec, tmp_path / "here", progress=False, log=quiet)
    try:
        rows = UnitTask(spec, str(tmp_path / "task"), 1)().rows  # as a worker runs it
    finally:
        _SWEEPS.pop(str(tmp_path / "task"), None)
    assert torch.get_default_dtype() == previous
    assert numbers(here.rows) == numbers(default.rows)
    assert numbers(rows) == [r for r in numbers(default.rows) if r["algorithm"] == "edm"]


class _Cluster:
    """dask's LocalCluster and Client, recording the workers asked for; the units run in
    a thread pool."""

    made: ClassVar[list[int]] = []

    def __init__(self, n_workers=None, **_):
        self.made.append(n_workers)

    def get_executor(self, pure=True):
        return ThreadPoolExecutor(1)

    def close(self):
        pass


@pytest.mark.parametrize(
    "flags,table,workers",
    [(["--jobs", "3"], "", 3), ([], "workers = 5\n", 5), (["--jobs", "2"], "workers = 5\n", 2)],
)
def test_jobs_sizes_a_local_dask_cluster(tmp_path, monkeypatch, flags, table, workers):
    import distributed
    from decentopt.cli import main

    monkeypatch.setattr(_Cluster, "made", [])
    monkeypatch.setattr(distributed, "LocalCluster", _Cluster)
    monkeypatch.setattr(distributed, "Client", lambda cluster: cluster)
    path = write(tmp_path, BASE + "[executor]\n" + table)
    args = ["run", str(path), "--out", str(tmp_path / "o"), "--executor", "dask", *flags]
    assert main([*args, "--no-progress"]) == 0
    assert _Cluster.made == [workers]


def test_a_wrong_number_of_dask_workers_is_one_line(tmp_path, capsys):
    from decentopt.cli import main

    path = write(tmp_path, BASE + '[executor]\nworkers = "many"\n')
    args = ["run", str(path), "--out", str(tmp_path / "o"), "--executor", "dask"]
    assert main([*args, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "workers = 'many'" in err and "--jobs" in err


def _logged(folder: Path) -> dict[str, list[int]]:
    """The steps each unit logged to the JSON-lines folder, by unit."""
    from decentopt.integrations.loggers.jsonl import read_jsonl

    return {
        path.stem: [e["step"] for e in read_jsonl(path) if e["event"] == "scalars"]
        for path in sorted((folder / "tiny").glob("*.jsonl"))
    }


def test_a_unit_made_elsewhere_is_logged_by_the_process_that_runs_it(tmp_path):
    """The sweep's loggers travel with each unit as NAME:TARGET and are made again where it
    runs (a SLURM job, a dask worker): every unit logs its steps there."""
    from decentopt.driver import RunOptions
    from decentopt.experiments.runner import Sweep
    from decentopt.integrations import loggers

    spec = load_spec(write(tmp_path, BASE))
    lines = tmp_path / "lines"
    monitor = loggers.make([f"jsonl:{lines}"])
    seen: list = []

    class Elsewhere(ThreadPoolExecutor):  # as a cluster's worker: nothing but the task
        def submit(self, fn, /, *args, **kwargs):
            seen.append(fn)
            return super().submit(fn, *args, **kwargs)

    options = RunOptions(progress=False, log=quiet, monitor=monitor)
    with Elsewhere(1) as pool:
        Sweep(spec, tmp_path / "o", options, executor=pool).run()
    assert [task.log for task in seen] == [(f"jsonl:{lines}",)] * 2
    steps = _logged(lines)
    assert set(steps) == {"ed", "edm"} and steps["edm"][-1] == 50 and steps["edm"][0] == 0
