"""Which rows a process running agents ``first, ..., first + k - 1`` sends and receives in a
gossip round (each row once per process that reads it), and the mix ``(W z)_i = w_ii z_i +
sum_j w_ij z_j`` it forms of them, summed in the order of agent ``i``'s neighbours."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from decentopt.communicator import slots

__all__ = ["Links", "Plan", "plan", "slots", "weigh"]

#: An agent's round: its self weight, the rows it reads (with their weights) and the agents
#: that read its row.
Links = tuple[float, tuple[tuple[int, float], ...], tuple[int, ...]]


@dataclass(frozen=True)
class Plan:
    """One round's messages of a process's agents."""

    links: tuple[Links, ...]  # its agents' links, in order
    sends: tuple[tuple[int, tuple[int, ...]], ...]  # (process, own agents' local rows it reads)
    receives: tuple[tuple[int, tuple[int, ...]], ...]  # (process, its agents this one reads)


def _ascending(by_process: dict[int, set[int]]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    return tuple((q, tuple(sorted(by_process[q]))) for q in sorted(by_process))


def plan(links: Sequence[Links], first: int) -> Plan:
    """The plan of the process running agents ``first, ...`` with these ``links``."""
    k = len(links)
    reads: dict[int, set[int]] = {}  # process -> its agents this one reads
    sends: dict[int, set[int]] = {}  # process -> own local rows it reads
    for a, (_, neighbours, targets) in enumerate(links):
        for j, _ in neighbours:
            if not first <= j < first + k:
                reads.setdefault(j // k, set()).add(j)
        for j in targets:
            if not first <= j < first + k:
                sends.setdefault(j // k, set()).add(a)
    return Plan(tuple(links), _ascending(sends), _ascending(reads))


def weigh(plan: Plan, first: int, rows: dict[int, torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    """``out[a] = w_ii z_i + sum_j w_ij z_j`` for each agent ``i = first + a``, ``rows`` by
    agent (every row its agents read, theirs included)."""
    for a, (own, neighbours, _) in enumerate(plan.links):
        torch.mul(rows[first + a], own, out=out[a])
        for j, w in neighbours:
            out[a].add_(rows[j], alpha=w)
    return out
