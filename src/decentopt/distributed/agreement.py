"""Do the ranks of a job agree? One collective of a fixed-size fingerprint.

Every rank describes what must be the same everywhere -- the method and its
hyper-parameters (nested parts such as a compression operator included), the
graph and its weights, the layout of the trainable parameters (shapes and
dtypes, per group), the group settings and the bucket size -- as a flat table
of readable fields. The ranks all-gather a 32-byte digest of that table; only
when the digests differ do they gather the tables themselves, so that every
rank raises the same one-line error naming the rank and the field that differ.
Without a check, ranks that disagree run on silently (other weights give a
wrong mean; two models with the same number of parameters mix unrelated
weights) or abort deep inside the backend.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from decentopt.algorithms.method import Method
from decentopt.comm.distributed import DistributedCommunicator
from decentopt.topology import Network, TopologySchedule, weights_digest

__all__ = [
    "RanksDisagree",
    "agree",
    "describe_algorithm",
    "describe_graph",
    "describe_params",
    "digest",
    "reference",
]


class RanksDisagree(ValueError):
    """The ranks of a job were started with different settings."""


def _plain(value: Any) -> str:
    """A value's repr without memory addresses (they differ between processes)."""
    return " ".join(re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value)).split())


def describe_algorithm(algorithm: Any, prefix: str = "method") -> dict[str, str]:
    """The name and every dataclass field of ``algorithm``, nested dataclasses (a gossip
    component, a compression operator) field by field; of other objects (a torch optimizer,
    whose groups are described apart) the class."""
    if isinstance(algorithm, Method):  # its rule's fields as the method's, then its gossip's
        fields = describe_algorithm(algorithm.rule, prefix)
        fields[prefix] = f"{algorithm.name} ({type(algorithm.rule).__name__})"
        fields |= describe_algorithm(algorithm.gossip, f"{prefix}.gossip")
        if algorithm.outer is not None:
            fields |= describe_algorithm(algorithm.outer, f"{prefix}.outer")
        return fields
    name = getattr(algorithm, "name", None)
    kind = type(algorithm).__name__
    fields = {prefix: f"{name} ({kind})" if isinstance(name, str) else kind}
    if dataclasses.is_dataclass(algorithm) and not isinstance(algorithm, type):
        for f in dataclasses.fields(algorithm):
            value = getattr(algorithm, f.name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                fields |= describe_algorithm(value, f"{prefix}.{f.name}")
            else:
                fields[f"{prefix}.{f.name}"] = _plain(value)
    return fields


def describe_graph(topology: Network) -> dict[str, str]:
    """The graph's name and size and a digest of its weights (of each round of a schedule)."""
    digested = "its rounds" if isinstance(topology, TopologySchedule) else "W"
    weights = f"graph weights (SHA-256 of {digested})"
    graph = f"{topology.name} with n = {topology.n}"
    return {"graph": graph, weights: weights_digest(topology)}


def describe_params(groups: Iterable[Mapping[str, Any]], settings: Iterable[str]) -> dict[str, str]:
    """Per group: its ``settings`` (lr, weight decay, ...) and each trainable parameter's
    shape and dtype, in order."""
    fields = {}
    for g, group in enumerate(groups):
        for key in settings:
            if key in group:
                fields[f"group {g} {key}"] = _plain(group[key])
        trainable = [p for p in group["params"] if p.requires_grad]
        fields[f"group {g} trainable parameters"] = str(len(trainable))
        for i, p in enumerate(trainable):
            fields[f"group {g} parameter {i}"] = f"shape {tuple(p.shape)}, {p.dtype}"
    return fields


def digest(fields: Mapping[str, str]) -> bytes:
    """The 32-byte SHA-256 of a description (its fields in key order)."""
    return hashlib.sha256(json.dumps(dict(fields), sort_keys=True).encode()).digest()


def _digests(comm: DistributedCommunicator, fields: Mapping[str, str]) -> list[bytes]:
    mine = torch.frombuffer(bytearray(digest(fields)), dtype=torch.uint8)
    everyone = [torch.empty_like(mine) for _ in range(comm.world_size)]
    comm.await_collective(
        dist.all_gather(everyone, mine, group=comm.group, async_op=True),
        "the ranks' agreement check",
        "a rank died, hung or does not build the optimizer at the same point",
    )
    return [t.numpy().tobytes() for t in everyone]


def _difference(tables: list[dict[str, str]], odd: int, ref: int) -> str:
    """The first field (in the odd rank's order) where rank ``odd`` differs from ``ref``."""
    mine, theirs = tables[odd], tables[ref]
    for key in [*mine, *(k for k in theirs if k not in mine)]:
        if mine.get(key) != theirs.get(key):
            return (
                f"{key} is {mine.get(key, '(absent)')} on rank {odd} but "
                f"{theirs.get(key, '(absent)')} on rank {ref}"
            )
    return "their descriptions differ"  # pragma: no cover - equal tables have equal digests


def reference(digests: list[bytes]) -> tuple[int, list[int]]:
    """``(ref, odd)``: the first rank of the most common setting (rank 0's among equally
    common ones), and the ranks whose setting differs from it, in order."""
    counts = collections.Counter(digests)
    common = max(counts, key=lambda d: (counts[d], d == digests[0]))
    return digests.index(common), [r for r, d in enumerate(digests) if d != common]


def agree(comm: Any, fields: Mapping[str, str], what: str = "the optimizer") -> None:
    """Raise :class:`RanksDisagree` on every rank unless all ranks give the same ``fields``.

    A no-op outside torch.distributed (a communicator without ranks, or a job of one)."""
    if not isinstance(comm, DistributedCommunicator) or comm.world_size <= 1:
        return  # (a distributed communicator is built in an initialised process group only)
    digests = _digests(comm, fields)
    if len(set(digests)) == 1:
        return
    tables: list[Any] = [None] * comm.world_size
    dist.all_gather_object(tables, dict(fields), group=comm.group)
    ref, odd = reference(digests)
    others = f" (and {len(odd) - 1} other rank(s): {odd[1:]})" if len(odd) > 1 else ""
    raise RanksDisagree(
        f"rank {comm.rank}: the ranks disagree on {what}: {_difference(tables, odd[0], ref)}"
        f"{others}; start every rank with the same configuration"
    )
