"""Communicator over ``torch.distributed``: one agent per process, neighbours only.

Each rank owns row ``rank`` of the stacked iterates, so tensors here are
``(1, ...)``. A gossip round sends the rank's flattened row to each agent that
reads it (its neighbours; over a directed graph its out-neighbours) and receives
the rows it reads, in one ``batch_isend_irecv`` (one flat message per link per
round, matched by order, not by tag, which NCCL ignores), then forms
``w_ii z_i + sum_j w_ij z_j``. :meth:`~DistributedCommunicator.mix_compressed`
sends the encoded bytes of a compression operator instead of the row (the bytes
on the wire shrink), and :meth:`~DistributedCommunicator.exchange` a different
message to each neighbour (RelaySGD). Works with NCCL (GPU) and gloo (CPU; CUDA tensors
travel through host memory, so several ranks may share one GPU for testing).
Over a :class:`~decentopt.topology.TopologySchedule` the neighbours and weights
are those of ``W_t`` at round ``t``, which every rank derives on its own (the
schedule is periodic or seeded by round): still no collective per round.

Failures: every receive waits at most ``timeout`` seconds (gloo); a peer that
dies or hangs raises :class:`PeerFailure` naming the peer, this rank and the
round, instead of hanging forever. A rank that leaves through
:func:`~decentopt.distributed.finalize` first records in the job's store how many
rounds it made (:mod:`~decentopt.comm.leaving`), so that a neighbour that goes on
(the ranks called ``step()`` a different number of times) says so instead of
blaming a death. At start-up, :meth:`check_consistency` verifies that every rank uses the
same W and world size.
"""

from __future__ import annotations

import functools
import re
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from decentopt.comm import leaving, routes
from decentopt.comm.base import CommStats, Shared, rows_of
from decentopt.comm.leaving import PeerFailure
from decentopt.comm.posted import Stream
from decentopt.compression import Compressor
from decentopt.compression import parse as parse_compression
from decentopt.topology import Network, TopologySchedule, weights_digest

__all__ = ["DistributedCommunicator", "PeerFailure", "settle_all"]

settle_all = leaving.settle_all


def through_host(tensor: torch.Tensor, op: Callable[[torch.Tensor], Any]) -> None:
    """``op`` on ``tensor`` in place; gloo cannot take CUDA tensors: through host memory."""
    if tensor.is_cuda and dist.get_backend() == "gloo":
        host = tensor.detach().cpu()
        op(host)
        tensor.copy_(host)
    else:
        op(tensor)


class DistributedCommunicator(Shared):
    """Gossip with graph neighbours over an initialised process group.

    Args:
        topology: the graph; its ``n`` must equal the world size.
        timeout: seconds to wait for a neighbour's message before failing.
        group: the process group (default: the world).
    """

    def __init__(
        self,
        topology: Network,
        *,
        timeout: float = 60.0,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is not initialised; start with torchrun (or "
                "decentopt launch) and call decentopt.distributed.init() first"
            )
        self.group = group
        self.world_size = dist.get_world_size(group)
        #: this process's (first) agent, its row of W: the rank itself, one agent per process
        self.rank = self._agent_of(dist.get_rank(group))
        self._agents = range(self.rank, self.rank + self.agents_per_process)
        if topology.n != self._agent_of(self.world_size):
            raise ValueError(self._mismatch(topology.n))
        self.topology = topology
        self.timeout = timedelta(seconds=timeout)
        self.stats = CommStats()
        self.backend = dist.get_backend(group)
        self._streams: dict[int, Stream] = {}  # delayed gossip: id(oldest sent row) -> stream
        self._store = leaving.register(self)  # where finished ranks say so
        #: the largest age, in rounds, of a neighbour's message used by delayed gossip
        self.oldest = 0
        #: the ages of the messages its last round used, per row it reads (:meth:`_links`)
        self.ages: tuple[int, ...] = ()
        self._planned: tuple[int, routes.Plan | None] = (-2, None)  # (round or -1, plan)

    #: agents per process (:class:`~decentopt.comm.ManyAgentCommunicator`'s ``n / world``)
    agents_per_process = 1
    #: processes per agent (:class:`~decentopt.comm.GroupCommunicator`'s)
    procs_per_agent = 1

    def _agent_of(self, process: int) -> int:
        """The (first) agent a process runs."""
        return process // self.procs_per_agent * self.agents_per_process

    def _mismatch(self, n: int) -> str:
        return (
            f"the topology has n = {n} agents but the job has {self.world_size} "
            f"processes; start {n}, one agent each (decentopt launch -n {n}, "
            f"torchrun --nproc-per-node {n})"
        )

    def _links(self, i: int, at: int | None = None) -> routes.Links:
        """Agent ``i``'s self weight, the rows it reads (with their weights) and the agents
        that read its row at round ``at`` (the current one by default)."""
        this_round = self.topology.at(self.stats.rounds if at is None else at)
        return float(this_round.self_weight[i]), this_round.neighbours(i), this_round.targets(i)

    # ----------------------------------------------------------------- checks
    def check_consistency(self, extra: str = "") -> None:
        """Fail on every rank if the ranks disagree on W (or on ``extra``, e.g. model size)."""
        mine = weights_digest(self.topology, extra)
        everyone: list[str | None] = [None] * self.world_size
        dist.all_gather_object(everyone, mine, group=self.group)
        differ = [r for r, h in enumerate(everyone) if h != everyone[0]]
        if differ:
            raise RuntimeError(
                f"rank {self.rank}: ranks {differ} use a different topology or model than rank 0 "
                "(mixing matrices or parameter counts differ); start every rank with the same "
                "configuration"
            )

    # ----------------------------------------------------------------- gossip
    def _p2p(
        self,
        sends: Sequence[tuple[int, torch.Tensor]],
        receives: Sequence[tuple[int, torch.Tensor]],
    ) -> int:
        """Send and receive these messages in one batch, and return the bytes sent; a peer
        that does not deliver within ``timeout`` raises :class:`PeerFailure` naming it, this
        rank and the round."""
        calls = [(dist.isend, *m) for m in sends] + [(dist.irecv, *m) for m in receives]
        ops = [dist.P2POp(op, tensor, j, group=self.group) for op, j, tensor in calls]
        if not ops:
            return 0
        start = time.monotonic()
        peer = None
        try:
            works = dist.batch_isend_irecv(ops)
            for k, work in enumerate(works):
                peer = ops[k].peer if len(works) == len(ops) else None
                self._wait(work)
        except RuntimeError as exc:
            waited = time.monotonic() - start
            everyone = ", ".join(map(str, sorted({op.peer for op in ops})))
            who = f"neighbour {peer}" if peer is not None else f"neighbour(s) {everyone}"
            how = (
                f"after {waited:.1f} s (timeout {self.timeout.total_seconds():g} s)"
                if waited >= 0.5 * self.timeout.total_seconds()
                else f"at once ({waited:.2f} s: its connection closed)"
            )
            finished = None if peer is None else self._finished(peer, self.stats.rounds + 1)
            raise PeerFailure(
                finished
                or f"rank {self.rank}: gossip round {self.stats.rounds} failed {how} waiting for "
                f"{who}: it died, hung or disconnected. Underlying error: {exc}"
            ) from None
        return sum(t.numel() * t.element_size() for _, t in sends)

    def _finished(self, peer: int, made: int) -> str | None:
        """The line for a ``peer`` that finished normally while this rank has made (or
        started) ``made`` rounds; None where it did not say so (it died or hung)."""
        return leaving.finished_line(self._store, self.rank, self._agent_of(peer), made)

    def _wait(self, work: dist.Work) -> None:
        """Wait for ``work``, at most ``timeout`` where the backend takes one (gloo)."""
        work.wait(self.timeout) if self.backend == "gloo" else work.wait()

    def await_collective(self, work: dist.Work, what: str, cause: str) -> None:
        """Wait for a collective's ``work``; where a rank does not join within ``timeout``
        (gloo), raise :class:`PeerFailure`: ``what`` got no answer, and the likely ``cause``."""
        start = time.monotonic()
        try:
            self._wait(work)
        except RuntimeError as exc:
            raise PeerFailure(
                f"rank {self.rank}: {what} got no answer within {time.monotonic() - start:.1f} s "
                f"(timeout {self.timeout.total_seconds():g} s): {cause}. Underlying error: "
                f"{str(exc).splitlines()[0] if str(exc) else repr(exc)}"
            ) from None

    def _host(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` where the backend can send it: gloo sends and reduces host memory only."""
        return (t.cpu() if self.backend == "gloo" and t.is_cuda else t).detach()

    def _rows(self, z: torch.Tensor, what: str) -> torch.Tensor:
        """``z`` as ``(k, -1)`` rows, ``k`` this process's agents, where the backend sends."""
        k = self.agents_per_process
        if z.shape[0] != k:
            raise ValueError(
                f"this process owns {k} agent(s): {what} expects shape ({k}, ...); "
                f"got {tuple(z.shape)}"
            )
        return self._host(z.detach().reshape(k, -1).contiguous())

    def _plan(self) -> routes.Plan:
        """This round's plan (:mod:`~decentopt.comm.routes`), kept over a static graph."""
        key = self.stats.rounds if isinstance(self.topology, TopologySchedule) else -1
        if self._planned[0] != key:
            self._planned = (key, routes.plan([self._links(i) for i in self._agents], self.rank))
        return self._planned[1]

    def _route(self, rows: torch.Tensor) -> tuple[routes.Plan, dict[int, torch.Tensor]]:
        """One counted round: this process's ``(k, B)`` rows to the processes that read them,
        theirs back; the plan, and every row its agents read (their own too) by agent."""
        plan = self._plan()
        k = self.agents_per_process
        received = [rows.new_empty(len(agents), rows.shape[1]) for _, agents in plan.receives]
        sent = self._p2p(
            [(q, (rows if len(a) == k else rows[list(a)]).view(-1)) for q, a in plan.sends],
            [(q, buf.view(-1)) for (q, _), buf in zip(plan.receives, received, strict=True)],
        )
        self._count(rows.shape[1] * rows.element_size(), sent)
        by_agent = dict(zip(self._agents, rows, strict=True))
        for (_, agents), buf in zip(plan.receives, received, strict=True):
            by_agent.update(zip(agents, buf, strict=True))
        return plan, by_agent

    def mix(self, z: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        rows = self._rows(z, "mix")
        plan, by_agent = self._route(rows)
        result = routes.weigh(plan, self.rank, by_agent, torch.empty_like(rows))
        result = result.to(z.device).view(z.shape)
        return result if out is None else out.copy_(result)

    def mix_posted(
        self, rounds: Sequence[Sequence[torch.Tensor]], bound: int
    ) -> list[torch.Tensor]:
        """Delayed gossip without waiting for neighbours' current round: ``rounds`` are the
        tensors this rank sent ``tau, ..., 1`` rounds ago and sends now (the same objects
        from call to call: the oldest identifies the stream, :mod:`~decentopt.comm.posted`).
        Now's are posted (``isend``/``irecv``) and this returns, per tensor,
        ``w_ii z_i(t - tau) + sum_j w_ij z_j(s_j)`` with ``t - bound <= s_j <= t - tau``:
        the newest message from ``j`` of that age, waiting only for the one of age ``bound``.
        The neighbours of round ``s + tau`` (the round that reads them) receive round ``s``."""
        if self.agents_per_process * self.procs_per_agent > 1:
            raise ValueError(
                f"delayed gossip keeps whole rows in flight between single processes: it needs "
                f"one agent per process, not {self.agents_per_process} agent(s) per process and "
                f"{self.procs_per_agent} process(es) per agent; use DistributedCommunicator, or "
                "a gossip that is not delayed"
            )
        tau = len(rounds) - 1
        r = self.stats.rounds
        flats = [self._host(torch.cat([z.detach().reshape(-1) for z in zs])) for zs in rounds]
        if bound > tau and isinstance(self.topology, TopologySchedule):
            raise ValueError(
                "bounded staleness needs a static graph; give delayed(tau) no staleness"
            )
        stream = self._streams.pop(id(rounds[0][0]), None)
        if stream is None or stream.key() is not rounds[0][0]:  # a new run: old ones are over
            dead = [key for key, old in self._streams.items() if old.key() is None]
            for old in [stream, *(self._streams.pop(key) for key in dead)]:
                if old is not None:  # (one whose row's id this run's row took, too)
                    old.settle(self._late)
            stream = Stream(rounds[0][0], self.timeout, bound > tau)
            leaving.POSTING.add(self)
            for k, flat in enumerate(flats[:-1]):  # the rounds before this stream's first
                self._post(stream, flat, r + k)
        self._post(stream, flats[-1], r + tau)
        self_weight, neighbors, _ = self._links(self.rank)
        received, age = stream.take([j for j, _ in neighbors], tau, bound, self._late)
        self.oldest = max(self.oldest, age)
        self.ages = tuple(stream.posted - 1 - stream.latest[j].round for j, _ in neighbors)
        self._streams[id(rounds[1][0])] = stream
        stream.key = weakref.ref(rounds[1][0])
        payload = flats[-1].numel() * flats[-1].element_size()
        self._count(payload, len(self._links(self.rank, r + tau)[2]) * payload)
        mixed = flats[0] * self_weight
        for (_, w), buf in zip(neighbors, received, strict=True):
            mixed.add_(buf, alpha=w)
        parts = mixed.to(rounds[0][0].device).split([z.numel() for z in rounds[0]])
        return [p.view(z.shape) for p, z in zip(parts, rounds[0], strict=True)]

    def _post(self, stream: Stream, flat: torch.Tensor, reader_round: int) -> None:
        _, neighbors, targets = self._links(self.rank, reader_round)
        ops = (
            lambda t, k: dist.isend(t, k, group=self.group),
            lambda t, j: dist.irecv(t, j, group=self.group),
        )
        stream.post(flat, targets, [j for j, _ in neighbors], ops, self._late)

    def _late(
        self, peer: int, round_: int, exc: BaseException | None, *, settling: bool = False
    ) -> PeerFailure:
        finished = self._finished(peer, self.stats.rounds + (0 if settling else 1))
        if finished is not None:
            return PeerFailure(finished)
        if exc is None or "Timed out" in str(exc):
            how = f"sent no message within {self.timeout.total_seconds():g} s"
        else:  # gloo's first line, without its source position
            how = "closed the link (" + re.sub(r"^\[[^]]*\]\s*", "", str(exc)).split(" [")[0] + ")"
        return PeerFailure(
            f"rank {self.rank}: neighbour {peer} {how} at round {round_} of delayed gossip: "
            f"rank {peer} died, hung or disconnected"
        )

    def settle(self) -> None:
        """Wait for this communicator's delayed messages in flight (:func:`settle_all`)."""
        for stream in self._streams.values():
            stream.settle(functools.partial(self._late, settling=True))
        self._streams.clear()
        leaving.POSTING.discard(self)

    def mix_compressed(
        self, z: torch.Tensor, compression: str | Compressor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q(z), W Q(z))``: each agent's encoded message travels; the received ones are
        decoded with their sender agents' random streams."""
        codec = parse_compression(compression)
        flat = self._rows(z, "mix_compressed")
        per_agent = rows_of(flat, z)
        _, r, k = per_agent.shape
        round_ = self.stats.rounds
        data = torch.stack([codec.encode(q, i, round_) for i, q in enumerate(per_agent, self.rank)])
        plan, messages = self._route(data)
        decoded = {
            j: codec.decode(m, j, round_, r, k, flat.dtype).reshape(-1) for j, m in messages.items()
        }
        own = torch.stack([decoded[i] for i in self._agents])
        mixed = routes.weigh(plan, self.rank, decoded, torch.empty_like(own))
        return own.to(z.device).view(z.shape), mixed.to(z.device).view(z.shape)

    def _send_slots(self, rows: list[torch.Tensor], received: list[torch.Tensor]) -> int:
        """The slots other processes' agents read, packed per pair of processes in ascending
        (sender, receiver) order; theirs into ``received``."""
        _, out, into = self._slots
        packed = torch.cat(rows, dim=1)
        bufs = {q: packed.new_empty(len(slots), packed.shape[1]) for q, slots in into.items()}
        sent = self._p2p(
            [(q, packed[slots].view(-1)) for q, slots in out.items()],
            [(q, buf.view(-1)) for q, buf in bufs.items()],
        )
        for q, slots in into.items():
            parts = bufs[q].split([r.shape[1] for r in rows], dim=1)
            for got, part in zip(received, parts, strict=True):
                got[slots] = part
        return sent

    def mean(self, z: torch.Tensor) -> torch.Tensor:
        """Exact average over all agents of all processes; a process that does not join
        within ``timeout`` raises :class:`PeerFailure` on the others (gloo)."""
        total = self._host(z.detach().sum(dim=0, keepdim=True))
        work = dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
        what = "an average over all ranks (all_reduce)"
        self.await_collective(work, what, "a rank died, hung or disconnected")
        return (total / (self.world_size * self.agents_per_process)).to(z.device)

    def barrier(self, stage: str) -> None:
        """Wait for every rank; name the ranks that did not arrive within ``timeout``."""
        try:
            if self.backend == "gloo":
                dist.monitored_barrier(self.group, timeout=self.timeout, wait_all_ranks=True)
            else:
                dist.barrier(self.group)
        except RuntimeError as exc:
            raise PeerFailure(
                f"rank {self.rank}: {stage}: ranks did not arrive within "
                f"{self.timeout.total_seconds():g} s. Underlying error: {exc}"
            ) from None
