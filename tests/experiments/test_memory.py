"""The memory estimate: within 2x of the measured peak for every kind, and a refusal
before anything is allocated."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from decentopt.experiments import ConfigError, load_spec, run_spec
from decentopt.experiments.runner import check_memory, memory_parts

MEASURE = """
import json, resource, sys, tempfile
from pathlib import Path
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
from decentopt.experiments import load_spec, run_spec, write_report
from decentopt.experiments.runner import check_memory
preset, quick, *sets = sys.argv[1:]
spec = load_spec(preset, quick=quick == "quick", overrides=sets)
base = rss()
need = check_memory(spec)
with tempfile.TemporaryDirectory() as folder:
    out = run_spec(spec, Path(folder), progress=False, log=lambda _: None, jobs=1)
    write_report(spec, out.rows, Path(folder), modified=True)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"estimate": base + need, "peak": peak}))
"""

CASES = {
    "quadratic, p < d (Gram matrices of x*)": (
        "fig1", "", "runs=20", "iterations=50", "problem_params.d=300", "problem_params.p=20"
    ),
    "quadratic, p >= d (per-agent Hessians)": (
        "fig1", "", "runs=10", "iterations=50", "problem_params.d=100", "problem_params.p=120"
    ),
    "a grid of 40 variants (result rows)": (
        "fig1", "", "runs=5", "iterations=300",
        "algorithms.edm.lr=[" + ",".join(f"{k / 1000}" for k in range(1, 41)) + "]",
    ),
    "logistic regression": ("fig2", "", "runs=20", "iterations=30", "problem_params.m=4000"),
    "neural training, three runs stepped together": (
        "fig3", "quick", "problem_params.epochs=2", "problem_params.milestones=[]",
        "problem_params.warmup_epochs=0", "problem_params.runs_per_batch=3",
    ),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_the_estimate_is_within_two_times_the_peak(case):
    """Peak resident memory of a process that runs the whole sweep and its report, against
    what it held before plus the estimate."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *CASES[case]], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    ratio = measured["estimate"] / measured["peak"]
    assert 0.5 <= ratio <= 2.0, (case, measured)


def test_a_problem_that_cannot_fit_is_refused_before_anything_is_allocated(tmp_path):
    spec = load_spec("fig1", overrides=["problem_params.d=1000000", "problem_params.p=20"])
    parts = memory_parts(spec)
    assert parts["global Hessian and its factorisations"] > 2**40  # (R, d, d): terabytes
    with pytest.raises(ConfigError, match=r"needs about .* GiB \(global Hessian"):
        check_memory(spec)
    with pytest.raises(ConfigError, match="lower runs, agents"):
        run_spec(spec, tmp_path / "out", progress=False, log=lambda _: None)
    assert not (tmp_path / "out").exists()


def test_result_rows_grow_with_variants_and_recorded_steps():
    key = "result rows and their report"
    base = memory_parts(load_spec("fig1"))[key]
    denser = memory_parts(load_spec("fig1", overrides=["record_points=1000"]))[key]
    assert denser / base == pytest.approx((1000 + 23) / (100 + 23))
    grid = ",".join(str(k / 1000) for k in range(1, 1001))
    many = memory_parts(load_spec("fig1", overrides=[f"algorithms.edm.lr=[{grid}]"]))[key]
    assert many / base == pytest.approx((7 + 1000) / 8)  # eight methods, EDM now 1000


def test_a_container_limit_refuses_what_memavailable_would_let_run(monkeypatch):
    """Inside a 3 GiB cgroup on a machine with far more free, a run estimated above half the
    limit (peaks reach 2x the estimate) is refused, not killed."""
    from decentopt import perf

    spec = load_spec("fig1", overrides=["problem_params.d=300", "problem_params.p=20"])
    need = sum(memory_parts(spec).values())
    monkeypatch.setattr(perf, "_mem_available", lambda: 64 * 2.0**30)
    monkeypatch.setattr(perf, "_address_space_room", lambda: None)
    monkeypatch.setattr(perf, "cgroup_memory", lambda: 1.5 * need)  # fits once, not twice
    with pytest.raises(ConfigError, match=r"peaks reach 2 times the estimate"):
        check_memory(spec)
    monkeypatch.setattr(perf, "cgroup_memory", lambda: 2.5 * need)
    assert check_memory(spec) == need


def test_parallel_jobs_are_as_many_of_the_largest_problem_as_fit(monkeypatch):
    """Sweeps or units computing at once each hold their problem: the largest is counted,
    with the margin peaks reach; one at least, ``jobs`` when the memory is not known."""
    from decentopt import perf
    from decentopt.experiments.units import parallel_jobs

    small = load_spec("fig1", overrides=["problem_params.d=30"])
    big = load_spec("fig1", overrides=["problem_params.d=300"])
    need = perf.MEMORY_MARGIN * sum(memory_parts(big).values())
    monkeypatch.setattr(perf, "cgroup_memory", lambda: None)
    monkeypatch.setattr(perf, "_address_space_room", lambda: None)
    monkeypatch.setattr(perf, "_mem_available", lambda: 2.5 * need)
    assert parallel_jobs([small, big], 8) == 2
    assert parallel_jobs([small], 8) > 2
    assert parallel_jobs([big], 1) == 1
    monkeypatch.setattr(perf, "_mem_available", lambda: need / 2)
    assert parallel_jobs([big], 8) == 1
    monkeypatch.setattr(perf, "_mem_available", lambda: None)
    assert parallel_jobs([big], 8) == 8


@pytest.mark.parametrize(
    "name, agents",
    [("complete", 10**6), ("ring", 10**9), ("torus", 10**8), ("erdos_renyi", 10**6)],
)
def test_a_huge_graph_is_refused_before_it_is_built(monkeypatch, name, agents):
    import functools
    import time

    from decentopt import perf, topology

    monkeypatch.setattr(perf, "_mem_available", lambda: 8 * 2.0**30)
    monkeypatch.setattr(perf, "cgroup_memory", lambda: None)
    monkeypatch.setattr(perf, "_address_space_room", lambda: None)

    @functools.wraps(topology.REGISTRY[name])  # the same signature, for the option checks
    def never(*args, **kwargs):
        raise AssertionError("built before the check")

    monkeypatch.setitem(topology.REGISTRY, name, never)
    extra = ["topology.p=0.2"] if name == "erdos_renyi" else []
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"\[topology\]: {name} over {agents:,} agents needs"):
        load_spec(
            "compare", quick=True, overrides=[f"agents={agents}", f'topology.name="{name}"', *extra]
        )
    assert time.monotonic() - start < 5


def test_an_absurd_number_of_agents_is_one_line(monkeypatch):
    with pytest.raises(ConfigError, match="1,180,591,620,717,411,303,424 agents needs"):
        load_spec("compare", quick=True, overrides=["agents=1180591620717411303424"])


def test_the_graph_is_counted_in_the_estimate():
    small = memory_parts(load_spec("fig1", overrides=['topology.name="complete"']))
    assert small["graphs"] == pytest.approx(32.0 * 32**2)


def test_an_outer_optimizer_counts_two_more_copies_of_the_iterates():
    key = "an outer optimizer's x_sync and momentum"
    plain = load_spec("fig1")
    outer = load_spec("fig1", overrides=['algorithms.edm.outer="nesterov(every=4)"'])
    assert memory_parts(plain)[key] == 0
    iterate = outer.params.iterate_bytes(agents=outer.agents, runs=outer.runs)
    assert memory_parts(outer)[key] == 2 * iterate > 0
