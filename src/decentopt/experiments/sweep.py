"""Run a configured sweep: every algorithm on every heterogeneity level, resumably.

All heterogeneity levels and repetitions of one algorithm run as one batched
simulation (levels are folded into the repetition axis), so a unit of work is
one algorithm. Each finished unit is written atomically to
``OUT/runs/ALG.csv`` plus ``ALG.json`` (its fingerprint, written last); a rerun
skips units whose fingerprint matches, so an interrupted sweep resumes and
loses nothing, and a changed hyper-parameter reruns only what it affects.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from decentopt import algorithms, topology
from decentopt.experiments.config import ExperimentConfig
from decentopt.problems import PAPER_PROBLEMS
from decentopt.results import read_csv, write_csv_atomic, write_text_atomic
from decentopt.simulate import SimulationResult, simulate

__all__ = ["SweepOutcome", "build_problem", "build_topology", "run_sweep"]


@dataclass
class SweepOutcome:
    rows: list[dict[str, Any]]
    ran: list[str]
    skipped: list[str]
    seconds: float


def build_topology(config: ExperimentConfig) -> topology.Topology:
    spec = dict(config.topology)
    name, n = spec.pop("name"), spec.pop("n")
    builder = topology.REGISTRY[name]
    if "seed" in inspect.signature(builder).parameters:
        spec["seed"] = config.seeds["graph"]
    return builder(n, **spec)


def build_problem(config: ExperimentConfig) -> Any:
    generator, het_param = PAPER_PROBLEMS[config.problem]
    params = dict(config.problem_params)
    for key in ("dtype", "compute_dtype"):
        if key in params:
            params[key] = getattr(torch, params[key])
    params[het_param] = config.heterogeneity
    return generator(
        n=config.topology["n"], repetitions=config.repetitions, seed=config.seeds["data"], **params
    )


def _rows(config: ExperimentConfig, result: SimulationResult, zeta2: list[float]) -> list[dict]:
    R = config.repetitions
    param = config.heterogeneity_param
    rows = []
    for col in range(len(result.diverged)):
        level, rep = divmod(col, R)
        for k, step in enumerate(result.steps):
            row: dict[str, Any] = {
                "algorithm": result.algorithm,
                param: config.heterogeneity[level],
                "zeta2": zeta2[col],
                "repetition": rep,
                "step": int(step),
            }
            for metric, values in result.history.items():
                row[metric] = float(values[k, col])
            row["diverged_at"] = int(result.diverged_at[col])
            rows.append(row)
    return rows


def _is_done(config: ExperimentConfig, runs: Path, name: str) -> bool:
    meta, table = runs / f"{name}.json", runs / f"{name}.csv"
    if not (meta.is_file() and table.is_file()):
        return False
    try:
        return json.loads(meta.read_text()).get("fingerprint") == config.fingerprint(name)
    except (json.JSONDecodeError, OSError):
        return False


def run_sweep(
    config: ExperimentConfig,
    out: str | Path,
    *,
    force: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> SweepOutcome:
    """Run (or resume) the sweep; returns all rows, read back from ``OUT/runs``."""
    start = time.perf_counter()
    runs = Path(out) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    todo = [a for a in config.algorithms if force or not _is_done(config, runs, a)]
    skipped = [a for a in config.algorithms if a not in todo]
    if skipped:
        log(f"resuming: {len(skipped)} finished run(s) kept ({', '.join(skipped)})")
    fresh: dict[str, list[dict[str, Any]]] = {}
    if todo:
        topo = build_topology(config)
        t0 = time.perf_counter()
        problem = build_problem(config)
        log(
            f"{config.name}: {problem!r} on {topo!r}, {config.heterogeneity_param} = "
            f"{config.heterogeneity} (built in {time.perf_counter() - t0:.1f} s)"
        )
        zeta2 = [float(z) for z in problem.zeta2]
        from tqdm.auto import tqdm

        bar = tqdm(todo, desc=config.name, disable=None if progress else True)
        for name in bar:
            bar.set_postfix_str(name)
            alg = algorithms.make(name, **config.algorithms[name])
            result = simulate(
                alg,
                problem,
                topo,
                config.iterations,
                seed=config.seeds["noise"],
                points=config.record_points,
                progress=progress,
            )
            fresh[name] = _rows(config, result, zeta2)
            write_csv_atomic(runs / f"{name}.csv", fresh[name])
            write_text_atomic(
                runs / f"{name}.json",
                json.dumps(
                    {
                        "fingerprint": config.fingerprint(name),
                        "algorithm": name,
                        "hyperparams": config.algorithms[name],
                        "seconds": result.wall_time,
                        "diverged": int(result.diverged.sum()),
                        "gossip_rounds": result.comm.rounds,
                    },
                    indent=2,
                    default=str,
                ),
            )
            n_div = int(result.diverged.sum())
            note = f", {n_div} repetition(s) diverged" if n_div else ""
            log(f"  {name:10s} {result.wall_time:6.2f} s{note}")
    rows: list[dict[str, Any]] = []
    for name in config.algorithms:
        rows += fresh[name] if name in fresh else read_csv(runs / f"{name}.csv")
    write_csv_atomic(Path(out) / "results.csv", rows)
    return SweepOutcome(rows, todo, skipped, time.perf_counter() - start)
