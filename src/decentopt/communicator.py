"""The communicator interface: everything that crosses agents goes through it.

Algorithms do only row-wise (per-agent) arithmetic on tensors whose first axis
is the agent axis, and call :meth:`Communicator.mix` to combine with
neighbours. In the simulator a tensor holds all ``n`` agents, ``(n, ...)``; on a
rank of the distributed backend it holds the agents that rank owns, ``(1, ...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import torch

from decentopt.topology import Network, TopologySchedule

if TYPE_CHECKING:
    from decentopt.compression import Compressor

__all__ = [
    "CommStats",
    "Communicator",
    "Elementwise",
    "Relaying",
    "Shared",
    "map_then_mix",
    "rows_of",
    "slot_table",
    "slots",
]

#: A row-wise update ``fn(*tensors, *scalars) -> (y_0, y_1, ...)``: every output
#: element depends only on the inputs' elements at the same index, so it may be
#: evaluated on any block of columns. Scalars arrive as Python floats or as 0-d
#: tensors of the state's dtype (use them in arithmetic, not as ``alpha=`` keywords;
#: :func:`decentopt.algorithms.base.add_scaled` does both).
Elementwise = Callable[..., tuple[torch.Tensor, ...]]


@dataclass
class CommStats:
    """Running totals of communication.

    ``bytes_sent`` counts what this process sent (all agents in the simulator,
    one agent on a rank); the other totals are over all agents of the graph, so
    every process of a job holds the same values: ``bytes_per_agent`` (the mean
    over agents), and per round the busiest agent's messages and bytes, which
    :class:`~decentopt.comm.cost.NetworkModel` turns into time.
    """

    rounds: int = 0
    bytes_sent: int = 0
    bytes_per_agent: float = 0.0
    busiest_messages: int = 0
    busiest_bytes: int = 0

    def add_round(self, mean_messages: float, max_messages: int, payload: int, sent: int) -> None:
        """Count one round: messages of ``payload`` bytes each; ``sent`` bytes left this process."""
        self.rounds += 1
        self.bytes_sent += sent
        self.bytes_per_agent += mean_messages * payload
        self.busiest_messages += max_messages
        self.busiest_bytes += max_messages * payload

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)


@runtime_checkable
class Communicator(Protocol):
    """Mixes agent-first tensors with the mixing matrix ``W``."""

    stats: CommStats
    #: The graph (``W``, or ``W_t`` by round) over all agents, whichever rows this process owns.
    topology: Network

    def mix(self, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Return ``W z`` (``W_t z`` at round ``t = stats.rounds``) for the rows this process
        owns: one gossip round.

        With ``out`` the result is written into that buffer and returned.
        """
        ...

    def mix_many(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """``[W z for z in zs]`` in one gossip round (the tensors travel packed together)."""
        ...

    def mix_map(
        self, fn: Elementwise, tensors: Sequence[torch.Tensor], scalars: Sequence[float] = ()
    ) -> tuple[torch.Tensor, ...]:
        """``(W y_0, y_1, ...)`` where ``(y_0, y_1, ...) = fn(*tensors, *scalars)``: an
        elementwise update whose first output is mixed, in one gossip round.

        The same as :func:`map_then_mix`; a communicator may instead evaluate ``fn``
        on blocks of columns and mix each block while it is in cache (the simulator,
        for large states over a circulant ``W``). ``fn`` should be a module-level
        function (or a ``functools.partial`` of one with constant keywords): compiled
        code is kept per function.
        """
        ...

    def mix_compressed(
        self, z: torch.Tensor, compression: str | Compressor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q(z), W Q(z))`` in one gossip round: each agent's rows (``z``'s last axis)
        compressed by ``compression`` (:mod:`decentopt.compression`), its own decoded
        ``Q(z)``, and the mix of everyone's. Bytes are counted (and, on torch.distributed,
        sent) compressed."""
        ...

    def mean(self, z: torch.Tensor) -> torch.Tensor:
        """Exact average over all agents (for metrics only, not a gossip round)."""
        ...

    def barrier(self, stage: str) -> None:
        """Wait for every process of the job (a no-op in one process); ``stage`` names it."""
        ...


class Relaying(Communicator, Protocol):
    """A communicator that also sends one message per neighbour, different per neighbour:
    what relaying (RelaySGD) needs over a static tree, beside the mixing calls."""

    @property
    def slots(self) -> int:
        """Neighbour slots of :meth:`exchange` (the graph's largest degree)."""
        ...

    def exchange(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """One round of one message per neighbour, different per neighbour: tensors of shape
        ``(rows, slots, ...)`` whose slot ``s`` goes to the ``s``-th neighbour (ascending);
        returns the messages received, slot ``s`` holding what the ``s``-th neighbour sent
        (zeros past the agent's degree). Static undirected graphs only."""
        ...


def rows_of(flat: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """The ``(m, r, k)`` view of a folded ``(m, -1)`` state: the rows a compression operator
    acts on are along ``z``'s last axis (``k``; one row per agent for a 1-d ``z``)."""
    k = z.shape[-1] if z.ndim > 1 else 1
    return flat.view(flat.shape[0], -1, k) if k else flat.view(flat.shape[0], 0, 0)


def slot_table(neighbors: Sequence[Sequence[int]]) -> tuple[np.ndarray, int]:
    """``(table, S)``: ``table[i, s]`` is agent ``i``'s ``s``-th neighbour (ascending), ``-1``
    past its degree; ``S`` the largest degree (the slots of ``exchange``)."""
    S = max((len(p) for p in neighbors), default=0)
    table = np.full((len(neighbors), S), -1, dtype=np.int64)
    for i, peers in enumerate(neighbors):
        table[i, : len(peers)] = sorted(peers)
    return table, S


def slots(
    neighbors: Sequence[Sequence[int]], first: int, k: int
) -> tuple[torch.Tensor, dict[int, list[int]], dict[int, list[int]]]:
    """For ``exchange`` over a static undirected graph, slots as rows ``a * S + s`` of a
    process's ``(k * S, -1)`` messages (local agent ``a``, slot ``s``): those moved in memory
    (a ``(2, m)`` tensor: received, sent), then by process the sent slots to it and the
    received slots from it, in ascending (sender, receiver) order."""
    table, S = slot_table(neighbors)
    slot = {(int(j), i): t for i in range(len(table)) for t, j in enumerate(table[i])}
    moves: list[tuple[int, int]] = []
    out: dict[int, list[int]] = {}
    into: dict[int, list[int]] = {}
    for i in range(len(table)):  # pairs (i, j) in ascending order on both sides
        for s, j in enumerate(table[i]):
            j = int(j)
            mine = first <= i < first + k
            theirs = first <= j < first + k
            if j < 0 or not (mine or theirs):
                continue
            sent = (i - first) * S + s
            received = (j - first) * S + slot[(i, j)]
            if mine and theirs:
                moves.append((received, sent))
            elif mine:
                out.setdefault(j // k, []).append(sent)
            else:
                into.setdefault(i // k, []).append(received)
    return torch.tensor(moves, dtype=torch.int64).view(-1, 2).T, out, into


def _totals(sent: np.ndarray) -> tuple[float, int, int]:
    return float(sent.mean()), int(sent.max(initial=0)), int(sent.sum())


def map_then_mix(
    comm: Communicator,
    fn: Elementwise,
    tensors: Sequence[torch.Tensor],
    scalars: Sequence[float] = (),
) -> tuple[torch.Tensor, ...]:
    """:meth:`Communicator.mix_map` done plainly: evaluate ``fn``, then mix its first output."""
    first, *rest = fn(*tensors, *scalars)
    return (comm.mix(first), *rest)


class Shared:
    """What the simulated and the distributed communicators share: ``mix_many`` as one
    ``mix`` of the tensors packed column-wise, ``mix_map`` done plainly, ``exchange`` over
    the slots of ``_slots`` (:func:`slots`), the messages of a round
    and their count."""

    topology: Network
    stats: CommStats
    #: the agents whose rows this process holds (the simulator: all ``n``)
    _agents: range

    @cached_property
    def _slots(self) -> tuple[torch.Tensor, dict, dict]:
        """For ``exchange``: this process's :func:`slots`."""
        return slots(self.topology.neighbors, self._agents.start, len(self._agents))

    @cached_property
    def _static_messages(self) -> tuple[float, int, int]:
        return _totals(self.topology.degrees)  # type: ignore[union-attr]

    def _count(self, payload: int, sent: int | None = None) -> None:
        """Count the current round, messages of ``payload`` bytes; ``sent`` bytes left this
        process (by default every agent's messages: all agents live in this process)."""
        if isinstance(self.topology, TopologySchedule):
            mean, most, total = _totals(self.topology.at(self.stats.rounds).messages)
        else:
            mean, most, total = self._static_messages
        self.stats.add_round(mean, most, payload, total * payload if sent is None else sent)

    def _fold(self, z: torch.Tensor) -> torch.Tensor:
        return z.reshape(z.shape[0], -1)

    def mix_many(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """One round for several tensors: one flat message per neighbour carries them all."""
        if len(zs) == 1:
            return [self.mix(zs[0])]  # type: ignore[attr-defined]
        flats = [self._fold(z) for z in zs]
        mixed = self.mix(torch.cat(flats, dim=1))  # type: ignore[attr-defined]
        parts = mixed.split([f.shape[1] for f in flats], dim=1)
        return [p.reshape(z.shape) for p, z in zip(parts, zs, strict=True)]

    mix_map = map_then_mix

    @property
    def slots(self) -> int:
        """Neighbour slots of ``exchange``: the graph's largest degree."""
        return self._check_exchange()

    def exchange(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """:meth:`Relaying.exchange`: a slot moves in memory where both agents are in this
        process, else by :meth:`_send_slots`."""
        k = len(self._agents)
        S = self._check_exchange(tensors, k)
        if S == 0:  # nobody has a neighbour (one agent): a round without messages
            self._count(0, 0)
            return [t.clone() for t in tensors]
        rows = [self._host(t.reshape(k * S, -1)) for t in tensors]
        received = [torch.zeros_like(r) for r in rows]
        moves = self._slots[0].to(rows[0].device)
        for got, sent in zip(received, rows, strict=True):
            got[moves[0]] = sent[moves[1]]
        sent = self._send_slots(rows, received)
        self._count(sum(r.shape[1] * r.element_size() for r in rows), sent)
        return [got.to(t.device).reshape(t.shape) for got, t in zip(received, tensors, strict=True)]

    def _send_slots(self, rows: list[torch.Tensor], received: list[torch.Tensor]) -> int | None:
        """Send the slots of ``rows`` that agents of other processes read, and receive theirs
        into ``received``; the bytes sent (None: every agent lives in this process)."""
        return None

    def _host(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` where this process sends from."""
        return t

    def _check_exchange(self, tensors: Sequence[torch.Tensor] = (), rows: int = 0) -> int:
        """The slots of ``exchange`` (the largest degree) over a static undirected graph, every
        tensor of ``tensors`` checked to be ``(rows, slots, ...)`` (rows: ``n``, or a rank's 1)."""
        if not {"symmetric", "static"} <= self.topology.offers:
            raise ValueError(
                f"exchange sends a message to each neighbour and hears back: it needs a static "
                f"undirected graph; {self.topology.name} is not one"
            )
        S = int(self.topology.max_degree)
        for t in tensors:
            if t.ndim < 2 or tuple(t.shape[:2]) != (rows, S):
                raise ValueError(
                    f"exchange expects tensors of shape ({'n' if rows > 1 else 1}, slots, ...) = "
                    f"({rows}, {S}, ...); got {tuple(t.shape)}"
                )
        return S
