"""Planning a sweep: its units, their folders, and the memory a run of them needs.

A unit is one algorithm variant with all its runs and panel levels batched into the
columns of one problem (convex kinds), or one variant on one group of runs (kinds
whose runs are units of their own, such as neural training). Every unit is planned,
named and checked before anything is built or written.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, NamedTuple

from decentopt.driver.timeline import pace
from decentopt.experiments.spec import ConfigError, RunSpec, Variant
from decentopt.experiments.store import Unit
from decentopt.perf import MEMORY_MARGIN, available_memory, gib
from decentopt.plan import TAIL_POINTS
from decentopt.topology.footprint import build_bytes

__all__ = ["Planned", "check_memory", "memory_parts", "plan_units", "run_groups", "unit_name"]

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
            "available; lower runs, agents, record_points, the grids of [algorithms], a "
            "delayed gossip's tau or the sizes in [problem_params]"
        )
    return need


def parallel_jobs(spec: RunSpec, jobs: int) -> int:
    """How many units of ``spec`` may compute at once on this host: ``jobs``, or fewer when
    each unit builds a problem of its own and they would not fit in memory together."""
    if run_groups(spec) != [None] and (free := available_memory()) is not None:
        need = MEMORY_MARGIN * sum(memory_parts(spec).values())
        jobs = min(jobs, int(free // need))
    return jobs
