"""Scaling study: measured exponents against the paper's Table 1 and section 3.1.

Two groups of measurements on the deterministic (sigma = 0) quadratic problem,
each repeated over independent problem instances (seeds), with exponents
fitted by least squares on a log-log scale, one fit per seed:

1. **DmSGD's steady-state bias** ``lim_t (1/n) sum_i ||x_i - x*||^2``, which the
   paper quotes as ``O(alpha^2 zeta^2 / ((1 - beta)^2 (1 - lambda)^2))``, against
   ``alpha``, ``zeta^2`` (through ``c``), ``1 - beta`` (PyTorch-style undampened
   momentum, the convention of that formula) and ``1 - lambda`` (ring sizes;
   the bias is divided by each instance's ``zeta^2``). The full study uses
   step sizes with ``alpha / (1 - beta) << 1 - lambda``, the regime where the
   bound's leading term applies: for larger steps every agent sits near its
   own local optimum and the bias saturates (``--quick`` runs there, for speed).
2. **The heterogeneity transient** of ED, EDM, DSGT and DSGT-HB: the consensus
   error accumulated over the run, ``sum_t (1/n) sum_i ||x_i(t) - xbar(t)||^2``,
   divided by ``zeta0^2``, across rings of n = 8 ... 64 agents. With identical
   starting points and exact gradients, all disagreement comes from
   heterogeneity; the paper's bounds give this term ``(1 - lambda)^-2`` for
   ED/EDM and ``(1 - lambda)^-3`` for DSGT.

The paper's exponents come from upper bounds; a measured exponent smaller in
magnitude does not contradict a bound, and the table says which case holds.

Every simulation of the study is a unit of the result store (when one is given,
as ``decentopt reproduce table1`` does): an interrupted study resumes, and a
measurement is computed again only when its settings change.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from decentopt import algorithms, theory, topology
from decentopt.driver import RunOptions
from decentopt.experiments.reports import markdown_table
from decentopt.experiments.runner import forked_map
from decentopt.experiments.spec import ConfigError
from decentopt.experiments.store import ResultStore, Unit
from decentopt.experiments.study import Request, Study
from decentopt.plotting import plot_scaling
from decentopt.problems import Quadratic
from decentopt.results import lock_folder, write_csv_atomic, write_text_atomic
from decentopt.simulate import simulate

__all__ = ["ScalingRow", "run_scaling", "run_table1", "scaling_markdown", "scaling_table"]


@dataclass(frozen=True)
class ScalingRow:
    quantity: str
    method: str
    variable: str
    paper_exponent: float
    exponents: tuple[float, ...]  # one fit per seed
    xs: tuple[float, ...]
    ys: tuple[tuple[float, ...], ...]  # per x, per seed
    mean: float  # of the exponents
    spread: float  # their standard deviation

    @classmethod
    def fitted(cls, *labels: Any, xs: Any, ys: Any) -> ScalingRow:
        """A row (quantity, method, variable, paper exponent) whose exponents are the slopes
        of log y on log x, fitted per seed to ``ys`` (shape (len(xs), seeds)); ``xs``: one
        value per row of ``ys``, or one per entry (then the row shows their means)."""
        ys = np.asarray(ys)
        xs = np.broadcast_to(np.asarray(xs, dtype=float).reshape(len(ys), -1), ys.shape)
        lx = np.log(xs)
        ly = np.log(ys)
        exponents = tuple(float(np.polyfit(lx[:, s], ly[:, s], 1)[0]) for s in range(ys.shape[1]))
        moments = (float(np.mean(exponents)), float(np.std(exponents)))
        return cls(
            *labels, exponents, tuple(map(float, xs.mean(axis=1))), tuple(map(tuple, ys)), *moments
        )


#: The layout of a measurement unit's rows; units of another layout are recomputed.
ROW_FORMAT = 1


def measured(
    store: ResultStore | None, name: str, key: dict[str, Any], compute: Callable[[], np.ndarray]
) -> tuple[np.ndarray, bool]:
    """``compute()`` (one value per seed) through the store's unit ``name``, fingerprinted
    by ``key``: stored values are reused while ``key`` is unchanged; and whether they were."""
    if store is None:
        return np.asarray(compute(), dtype=np.float64), False
    blob = json.dumps(key | {"rows": ROW_FORMAT}, sort_keys=True, default=repr)
    unit = Unit(name, hashlib.sha256(blob.encode()).hexdigest()[:16], {"measures": key})

    def rows(_folder: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        values = np.asarray(compute(), dtype=np.float64).reshape(-1)
        return [{"seed": s, "value": float(v)} for s, v in enumerate(values)], {}

    stored = store.claimed(unit, rows, lease=False)
    values = np.array([r["value"] for r in sorted(stored.rows, key=lambda r: r["seed"])])
    return values, not stored.computed


def dmsgd_bias_rows(
    seeds: int, quick: bool, log: Callable[[str], None], store: ResultStore | None = None
) -> list[ScalingRow]:
    """DmSGD's steady-state bias against alpha, zeta^2, 1 - beta and (divided by each
    instance's zeta^2) 1 - lambda over ring sizes."""
    n, d, p = (8, 4, 8) if quick else (16, 5, 10)
    base = {"lr": 0.02 if quick else 0.001, "beta": 0.5, "dampening": False}

    def bias(unit: str, hp: dict, m: int = n, c: Any = 1.0) -> tuple[np.ndarray, Quadratic, Any]:
        """The bias of ``m`` agents on a ring (one value per seed and ``c``), the problem
        and the ring."""
        prob = Quadratic.paper(n=m, d=d, p=p, c=c, sigma2=0.0, repetitions=seeds, seed=11)
        topo = topology.ring(m)
        # enough steps for the optimisation (rate alpha mu) and the consensus (1 - lambda)
        alpha_mu = hp["lr"] / (1 - hp["beta"]) * float(prob.mu.min())
        T = int(min(150_000, 25 / alpha_mu + 25 / topo.spectral_gap))

        def compute() -> np.ndarray:
            res = simulate(algorithms.make("dmsgd", **hp), prob, topo, T, record=T)
            return res.final("dist_to_opt")

        key = {"method": "dmsgd", "hp": hp, "graph": topo.name, "iterations": T}
        key["problem"] = {"n": m, "d": d, "p": p, "c": c, "seeds": seeds, "seed": 11}
        return measured(store, f"bias-{unit}", key, compute)[0], prob, topo

    def row(variable: str, paper: float, xs: Any, ys: Any, what: str = "DmSGD bias") -> ScalingRow:
        fitted = ScalingRow.fitted(what, "dmsgd", variable, paper, xs=xs, ys=ys)
        log(f"  DmSGD bias vs {variable}: {fitted.mean:.2f}")
        return fitted

    alphas = [0.0005, 0.001, 0.002, 0.004] if not quick else [0.01, 0.02, 0.04]
    ys = [bias(f"alpha{a:g}", base | {"lr": a})[0] for a in alphas]
    rows = [row("alpha", 2.0, alphas, ys)]
    cs = [2.0, 1.0, 0.5, 0.25]
    levels, multi, _ = bias("zeta", base, c=cs)
    zeta = multi.zeta2.numpy().reshape(len(cs), seeds)
    rows.append(row("zeta^2", 1.0, zeta, levels.reshape(len(cs), seeds)))
    betas = [0.0, 0.3, 0.6, 0.8]
    ys = [bias(f"beta{b:g}", base | {"beta": b})[0] for b in betas]
    rows.append(row("1 - beta", -2.0, [1 - b for b in betas], ys))
    gaps: list[float] = []
    ys = []
    for m in [6, 8, 12, 16, 24] if not quick else [6, 8, 12]:
        values, prob, topo = bias(f"ring{m}", base, m)
        gaps.append(topo.spectral_gap)
        ys.append(values / prob.zeta2.numpy())
    rows.append(row("1 - lambda", -2.0, gaps, ys, "DmSGD bias / zeta^2"))
    return rows


def _consensus_sum(
    name: str, hp: dict, prob: Quadratic, topo: topology.Topology, iterations: int
) -> np.ndarray:
    """The consensus error summed over every iteration of a run, per seed."""
    res = simulate(algorithms.make(name, **hp), prob, topo, iterations, record="all")
    return np.nansum(res.history["consensus"], axis=0)


TRANSIENT_EXPONENT = {"ed": -2.0, "edm": -2.0, "dsgt": -3.0, "dsgt_hb": -3.0}


def transient_rows(
    seeds: int,
    quick: bool,
    log: Callable[[str], None],
    store: ResultStore | None = None,
    jobs: int = 1,
) -> list[ScalingRow]:
    """The heterogeneity transient of ED, EDM, DSGT and DSGT-HB over ring sizes; the
    simulations run in ``jobs`` workers, the longest (largest rings) first."""
    d = 4 if quick else 5
    p = 8 if quick else 10
    sizes = [6, 8, 12] if quick else [8, 12, 16, 24, 32, 48, 64]
    momentum = {"lr": 0.02, "beta": 0.5}
    hps = {"ed": {"lr": 0.02}, "edm": momentum, "dsgt": {"lr": 0.02}, "dsgt_hb": momentum}
    sums: dict[str, list[np.ndarray]] = {name: [] for name in hps}
    gaps = []
    zeta0s = []
    said = []
    pending = []
    # measured on a copy of the store (in workers' processes or in this one), whose units
    # are noted in ``store`` here, once
    apart = None if store is None else dataclasses.replace(store, ran=[], kept=[])
    for m in sizes:
        prob = Quadratic.paper(n=m, d=d, p=p, c=0.5, sigma2=0.0, repetitions=seeds, seed=13)
        topo = topology.ring(m)
        gaps.append(topo.spectral_gap)
        grad0 = prob.full_gradient(prob.initial_point())
        zeta0s.append(np.array([theory.zeta0_squared(topo.W, grad0[:, r]) for r in range(seeds)]))
        T = int(min(80_000, 40 / (0.02 * float(prob.mu.min())) + 60 / topo.spectral_gap))
        for name, hp in hps.items():
            summed = functools.partial(_consensus_sum, name, hp, prob, topo, T)
            key = {"method": name, "hp": hp, "n": m, "d": d, "p": p, "seeds": seeds, "T": T}
            pending.append((apart, f"transient-ring{m}-{name}", key, summed))
        said.append(f"  transient, ring({m}), 1 - lambda = {topo.spectral_gap:.4g}, {T} iterations")
    done = iter(forked_map(jobs, measured, pending[::-1])[::-1])
    for m, zeta0, line in zip(sizes, zeta0s, said, strict=True):
        for name in hps:
            values, kept = next(done)
            if store is not None:
                (store.kept if kept else store.ran).append(f"transient-ring{m}-{name}")
            sums[name].append(values / zeta0)
        log(line)
    labels = ("heterogeneity transient", "1 - lambda")
    return [
        ScalingRow.fitted(labels[0], name, labels[1], paper, xs=gaps, ys=sums[name])
        for name, paper in TRANSIENT_EXPONENT.items()
    ]


def run_scaling(
    *,
    seeds: int = 5,
    quick: bool = False,
    log: Callable[[str], None] = print,
    store: ResultStore | None = None,
    jobs: int = 1,
) -> list[ScalingRow]:
    """Run both studies; ``quick`` uses small sizes (for tests), the default the full table.

    ``store``: every simulation is a unit of it (resumable); without one, all run afresh.
    ``jobs``: worker processes for the transient's simulations (the bias's are short).
    """
    if seeds < 2:
        raise ValueError("the scaling study needs at least 2 seeds to report a spread")
    torch.manual_seed(0)
    log("DmSGD steady-state bias (deterministic gradients):")
    rows = dmsgd_bias_rows(seeds, quick, log, store)
    log("heterogeneity transient (deterministic gradients):")
    rows += transient_rows(seeds, quick, log, store, jobs)
    return rows


def _verdict(row: ScalingRow) -> str:
    measured = row.mean
    paper = row.paper_exponent
    if abs(measured - paper) <= max(0.25, 2 * row.spread):
        return "matches"
    if abs(measured) < abs(paper) and math.copysign(1, measured) == math.copysign(1, paper):
        return "milder than the bound"
    return "**differs**"


def scaling_table(rows: Sequence[ScalingRow]) -> list[dict[str, object]]:
    """Tidy rows of the study, one per fitted exponent (seeds as columns)."""
    return [
        {"quantity": r.quantity, "method": r.method, "variable": r.variable}
        | {"paper_exponent": r.paper_exponent, "mean": r.mean, "spread": r.spread}
        | {f"seed{i}": e for i, e in enumerate(r.exponents)}
        for r in rows
    ]


def scaling_markdown(rows: Sequence[ScalingRow]) -> str:
    header = ["quantity", "method", "against", "fitted exponent (mean ± spread over seeds)"]
    fit = "{0.mean:+.2f} ± {0.spread:.2f}"
    cells = [
        [r.quantity, r.method, r.variable, fit.format(r), f"{r.paper_exponent:+g}", _verdict(r)]
        for r in rows
    ]
    return markdown_table([*header, "paper", "against the paper's bound"], cells)


def _refuse_options(study: Study, how: Request) -> None:
    """What a run's options would change and this study has not: refused before it runs."""
    if how.only is not None:
        raise ConfigError(
            f"--only: {study.name} measures fixed methods in fixed roles and has no "
            "algorithm labels to choose from; leave --only out"
        )
    if how.check:
        raise ConfigError(
            f"--check: {study.name} states no claims to judge; its table gives every fitted "
            "exponent's verdict against the paper's (matches, milder than the bound, differs) "
            "on every run; leave --check out"
        )
    if how.sets:
        raise ConfigError(
            f"--set: {study.name}'s measurements are built in (decentopt.experiments.scaling); "
            "its file has seeds and [quick] only: edit a copy and run it with decentopt run"
        )


def run_table1(study: Study, out: Path, options: RunOptions, how: Request) -> list[Path]:
    """Table 1's scaling study into ``out``; each simulation a unit of ``out/runs``."""
    _refuse_options(study, how)
    say = options.log
    with lock_folder(out):
        store = ResultStore(out / "runs", force=options.force)
        rows = run_scaling(
            seeds=study.seeds, quick=study.small, log=say, store=store, jobs=options.jobs
        )
    if store.kept:
        say(f"resumed: {len(store.kept)} finished measurement(s) kept")
    md = scaling_markdown(rows)
    say(md)
    write_text_atomic(out / "table1.md", md)
    table = write_csv_atomic(out / "table1.csv", scaling_table(rows))
    return [table, out / "table1.md", *plot_scaling(rows, out / "table1")]
