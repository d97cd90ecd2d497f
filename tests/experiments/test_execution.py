"""Forked workers: a worker that dies costs its own unit only, which runs again; every
finished unit is kept; a pool stops at once."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from decentopt.experiments import load_spec, run_spec
from decentopt.experiments.runner import Sweep
from tests.experiments.test_spec import BASE, write

FOUR = BASE + "[algorithms.dsgd]\n[algorithms.dmsgd]\n"  # units ed, edm, dsgd, dmsgd


def numbers(rows):  # everything but the timing columns
    return [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]


def dying(monkeypatch, label: str, marker: Path, sig: int, times: int = 1) -> None:
    """The unit ``label`` kills its own worker with ``sig`` (the first ``times`` tries);
    forked workers inherit the patch."""
    compute = Sweep.compute

    def patched(self, variant, group, folder):
        if variant.label == label:
            tried = int(marker.read_text()) if marker.exists() else 0
            if tried < times:
                marker.write_text(str(tried + 1))
                os.kill(os.getpid(), sig)
                time.sleep(30)  # until the signal ends it
        return compute(self, variant, group, folder)

    monkeypatch.setattr(Sweep, "compute", patched)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.parametrize("label", ["ed", "dsgd", "dmsgd"], ids=["after0", "after2", "after3"])
def test_a_unit_whose_worker_dies_is_named_and_computed_again(tmp_path, monkeypatch, sig, label):
    spec = load_spec(write(tmp_path, FOUR))
    serial = run_spec(spec, tmp_path / "s", progress=False, log=lambda _: None)
    dying(monkeypatch, label, tmp_path / "tries", sig)
    lines: list[str] = []
    parallel = run_spec(spec, tmp_path / "p", progress=False, jobs=2, log=lines.append)
    died = [line for line in lines if "died" in line]
    assert len(died) == 1, lines
    assert died[0].split()[0] == label and f"killed by {signal.Signals(sig).name}" in died[0]
    assert "computing it again" in died[0]
    assert numbers(parallel.rows) == numbers(serial.rows)
    assert sorted(parallel.ran) == sorted(serial.ran)
    assert all((tmp_path / "p" / "runs" / u / "meta.json").is_file() for u in serial.ran)


def test_a_unit_whose_worker_dies_twice_is_reported_and_the_rest_kept(
    tmp_path, monkeypatch, capsys
):
    from decentopt.cli import main

    path = write(tmp_path, FOUR)
    dying(monkeypatch, "edm", tmp_path / "tries", signal.SIGKILL, times=2)
    out = tmp_path / "o"
    code = main(["run", str(path), "--out", str(out), "--jobs", "2", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "1 unit(s) not computed" in err and "edm" in err and "rerun" in err
    kept = {p.name for p in (out / "runs").iterdir() if (p / "meta.json").is_file()}
    assert kept == {"ed", "dsgd", "dmsgd"}
    # the rerun says at once what it keeps, and computes the lost unit alone
    lines: list[str] = []
    again = run_spec(load_spec(path), out, progress=False, jobs=2, log=lines.append)
    assert again.ran == ["edm"] and sorted(again.kept) == ["dmsgd", "dsgd", "ed"]
    assert lines[0].startswith("resuming: 3 finished unit(s) kept")


def _sleep(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_a_pool_stops_its_busy_workers_at_once():
    from decentopt.experiments.execution import ForkPool

    pool = ForkPool(2)
    futures = [pool.submit(_sleep, 60) for _ in range(3)]
    time.sleep(0.5)  # both workers busy, one task queued
    pids = [process.pid for process in pool._pool]
    start = time.monotonic()
    pool.stop()
    assert time.monotonic() - start < 5  # stop() waits at most 5 s per worker, never 60
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert futures[2].cancelled()


def test_a_task_that_cannot_be_sent_fails_alone_and_its_worker_serves_the_next():
    from decentopt.experiments.execution import ForkPool

    pool = ForkPool(1)
    try:
        unsendable = pool.submit(_sleep, threading.Lock())  # a lock cannot be pickled
        with pytest.raises(TypeError, match="pickle"):
            unsendable.result(timeout=30)
        assert pool.submit(_sleep, 0).result(timeout=30) == pool._pool[0].pid
    finally:
        pool.shutdown()


def test_a_rerun_names_at_most_a_few_of_the_units_it_keeps():
    from decentopt.experiments.execution import SHOWN, Progress

    lines: list[str] = []
    names = [f"u{k}" for k in range(20)]
    Progress(lines.append, 25).reused(names)
    assert lines == [
        f"resuming: 20 finished unit(s) kept ({', '.join(names[:SHOWN])} and "
        f"{20 - SHOWN} more); 5 to compute"
    ]


def test_a_broken_pool_of_the_callers_is_one_error_naming_the_units_not_computed(
    tmp_path, monkeypatch
):
    """A ProcessPoolExecutor given by the caller breaks when one worker dies (it cannot
    tell which): the units it lost are named in one error, the finished ones stored."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from decentopt.experiments.execution import WorkersLost

    spec = load_spec(write(tmp_path, FOUR))
    dying(monkeypatch, "dmsgd", tmp_path / "tries", signal.SIGKILL, times=10)
    out = tmp_path / "o"
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        with pytest.raises(WorkersLost) as error:
            run_spec(spec, out, progress=False, log=lambda _: None, executor=pool)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "dmsgd" in message
    lost = set(message.split(": ", 1)[1].split(";")[0].split(", "))
    stored = {p.name for p in (out / "runs").iterdir() if (p / "meta.json").is_file()}
    assert lost | stored == {"ed", "edm", "dsgd", "dmsgd"} and not lost & stored


def test_forked_workers_inherit_the_problem_built_once(tmp_path):
    lines: list[str] = []
    spec = load_spec(write(tmp_path, FOUR))
    run_spec(spec, tmp_path / "o", progress=False, jobs=2, log=lines.append)
    assert sum("built in" in line for line in lines) == 1
    assert sorted(line.split()[0] for line in lines if " done (" in line) == sorted(spec.algorithms)
