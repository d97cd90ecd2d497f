"""A time model for the simulator: when each agent finishes each step, in simulated seconds.

Agent ``i`` computes step ``t`` for ``c_i(t)`` seconds: ``compute`` times a lognormal factor
``exp(noise N - noise^2 / 2)`` (mean one; ``N`` standard normal, drawn from ``seed``), times
``factor`` while it is one of the ``slow`` agents; with ``moves_every = k`` the slow agents
move on to the next agents (``i + 1 mod n``) every ``k`` steps. Its messages then go out one
after the other, each costing ``latency + payload / bandwidth`` (the network cost model,
:class:`~decentopt.comm.cost.NetworkModel`); ``s_j`` is agent ``j``'s sending time, all
of its messages of the round (one to each agent that reads it).

With ``T_i(0) = 0``, ``r_j(t) = T_j(t) + c_j(t)`` (step computed) and a method whose gossip
mixes the neighbours' values of ``lag`` rounds ago (0: synchronous, ``tau``: delayed gossip),

.. math:: T_i(t+1) = \\max\\big(r_i(t), \\max_{j \\in N_i} r_j(t - \\text{lag}) + s_j\\big),

for ``t >= lag``, and ``T_i(t+1) = r_i(t)`` before (no message is awaited: the values mixed
then are the neighbours' initial ones, which every agent knows): a synchronous method
advances at the pace of its slowest neighbour; a delayed one lets ``lag`` steps of
computation overlap the messages. A row's time is ``max_i T_i(t)``, when the whole iterate
of step ``t`` exists. An asynchronous method (AD-PSGD) waits for nobody:
``T_i(t+1) = T_i(t) + c_i(t) + latency + payload / bandwidth`` (one message to one
neighbour), and a row's time is when the agents have made ``n t`` updates between them (the
simulator's synchronous equivalent makes ``n`` per iteration; the clock charges the
throughput of agents that run at their own pace). A step that sends nothing (a local
step: ``Method.talks(t) == "none"``) waits for nobody, ``T_i(t+1) = r_i(t)``; an exact
average over all agents (``"all"``, Gossip-PGA) waits for every agent and a ring
all-reduce, ``T_i(t+1) = max_j r_j(t) + 2 (n - 1) (latency + payload / (n bandwidth))``;
an outer optimizer's average after a gossip step (``"gossip+all"``) is that all-reduce
after the gossip round, from ``max_j T_j(t+1)``.
Bounded staleness (``delayed(tau, staleness=S)``) is simulated as the ranks run it
(:mod:`decentopt.driver.arrivals`): each agent uses each neighbour's newest message that
has arrived by its own clock, waits only for one ``S`` rounds old, and the clock is its
waits (:func:`stale_timeline`). The same model and seed give the same timeline, bit for
bit: it depends on the graph, the pace and the payload only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cache, partial
from typing import Any

import numpy as np

from decentopt._schema import bounded, check_fields
from decentopt.algorithms.method import as_method
from decentopt.comm.aged import AgedCommunicator
from decentopt.comm.simulated import SimulatedCommunicator
from decentopt.comm.watch import staleness
from decentopt.driver.arrivals import StaleRun, neighbour_slots, stale_run

__all__ = [
    "TimeModel",
    "clock",
    "clock_rows",
    "compute_times",
    "pace",
    "simulated_communicator",
    "stale_timeline",
    "staleness",
    "timed",
]


#: The largest seed of the time model's random stream (a 64-bit seed).
MAX_TIMING_SEED = 2**63 - 1


@dataclass(frozen=True)
class TimeModel:
    """Compute time per step (seconds), its lognormal ``noise`` (sigma), the ``slow`` agents
    and their ``factor``, how often they move on (``moves_every`` steps, 0: never), the
    links' ``latency`` (s per message) and ``bandwidth`` (bytes/s), and the ``seed``.

    Each number has limits (:data:`LIMITS`) within which every step's time, and so the
    clock of any run of up to 10^12 steps, stays finite in double precision (a step costs
    at most compute x factor x e^(noise x 40), lognormal draws beyond 40 sigma aside, plus
    its messages at latency + payload / bandwidth each); the note of each says why."""

    compute: float = bounded(
        1e-2,
        above=0,
        limits=(0.0, 1e9),
        unit=" seconds",
        note="seconds per step; 1e9 is 30 years",
    )
    noise: float = bounded(
        0.0,
        minimum=0,
        limits=(0.0, 10.0),
        note="the sigma of a step time's logarithm; at 10, one step in a thousand takes "
        "1e13 times the median",
    )
    slow: tuple[int, ...] = bounded((), minimum=0, message="names agents by index >= 0")
    factor: float = bounded(
        1.0,
        minimum=1,
        limits=(1.0, 1e9),
        note="how many times slower a slow agent is; 1 is not slower",
    )
    moves_every: int = bounded(0, minimum=0)
    latency: float = bounded(
        5e-5,
        minimum=0,
        limits=(0.0, 1e9),
        unit=" seconds",
        note="seconds per message; 1e9 is 30 years",
    )
    bandwidth: float = bounded(
        1e9,
        above=0,
        limits=(1e-3, 1e300),
        unit=" bytes/s",
        note="bytes per second; at 1e-3 a kilobyte takes 30 years",
    )
    seed: int = bounded(0, minimum=0, maximum=MAX_TIMING_SEED)

    def __post_init__(self) -> None:
        check_fields(self, "TimeModel")

    def message_seconds(self, payload: float) -> float:
        return self.latency + payload / self.bandwidth


#: The limits of the time model's numbers, ``(lowest, highest, unit)`` by name.
LIMITS: dict[str, tuple[float, float, str]] = {
    f.name: (*f.metadata["limits"], f.metadata["unit"])
    for f in fields(TimeModel)
    if f.metadata.get("limits")
}


def compute_times(model: TimeModel, n: int, steps: int) -> np.ndarray:
    """``(steps, n)`` seconds each agent computes each step."""
    late = [a for a in model.slow if a >= n]
    if late:
        raise ValueError(f"timing: slow agent {late[0]} does not exist among n = {n} agents")
    rng = np.random.default_rng(model.seed)
    times = np.full((steps, n), float(model.compute))
    if model.noise:
        draw = rng.standard_normal((steps, n))
        times *= np.exp(model.noise * draw - model.noise**2 / 2)
    if model.slow and model.factor != 1:
        rows = np.arange(steps)
        shift = rows // model.moves_every if model.moves_every else np.zeros(steps, dtype=int)
        for agent in model.slow:
            times[rows, (agent + shift) % n] *= model.factor
    return times


def _reads(graph: Any, t: int) -> np.ndarray:
    """``(n, n)``: whether agent ``i`` reads agent ``j`` in round ``t`` (self excluded)."""
    reads = graph.at(t).matrix() != 0
    np.fill_diagonal(reads, False)
    return reads


def _own_pace(model: TimeModel, n: int, steps: int, one: float) -> np.ndarray:
    """The asynchronous clock: when the agents have made ``n t`` updates between them. Fast
    agents make more than ``steps`` updates: draw more rows until every agent's last drawn
    update comes after the ``n steps``-th (the draws of more rows extend the same stream)."""
    if steps == 0:
        return np.zeros(1)
    rows = steps
    while True:
        finish = np.cumsum(compute_times(model, n, rows) + one, axis=0)  # agent i's k-th update
        done = np.sort(finish.ravel(), kind="stable")
        needed = done[n * np.arange(1, steps + 1) - 1]
        if needed[-1] <= finish[-1].min():
            return np.concatenate([[0.0], needed])
        rows *= 2


def pace(algorithm: Any) -> tuple[int, bool]:
    """``(lag, asynchronous)`` of a method (:attr:`~decentopt.algorithms.Method.pace`)."""
    return as_method(algorithm).pace


def stale_timeline(
    model: TimeModel, graph: Any, steps: int, payload: float, tau: int, bound: int
) -> StaleRun:
    """The ages each agent uses and the clock under ``delayed(tau, staleness=bound)``
    (:func:`~decentopt.driver.arrivals.stale_run`) on a static ``graph``: compute times of
    the model, and a message of ``j`` reaching its readers ``s_j`` after it computed (its
    messages of the round one after the other, as :func:`clock` charges them)."""
    reads = _reads(graph, 0)
    send = reads.sum(axis=0) * model.message_seconds(payload)
    slots = neighbour_slots(graph.neighbors)
    return stale_run(compute_times(model, graph.n, steps), slots, send, tau, bound)


def simulated_communicator(
    algorithm: Any,
    graph: Any,
    model: TimeModel | None,
    steps: int,
    columns: int = 1,
    kernel: str = "auto",
) -> SimulatedCommunicator:
    """The simulator's communicator for a method: under a time model and bounded staleness
    one that mixes each neighbour's message at the age :func:`stale_timeline` gives
    (``columns``: a message's payload is per column, as :func:`timed` charges it)."""
    stale = None if model is None else staleness(algorithm)
    if model is None or stale is None:
        return SimulatedCommunicator(graph, kernel=kernel)

    def ages(payload: float, rounds: int) -> np.ndarray:
        return stale_timeline(model, graph, rounds, payload, *stale).ages

    return AgedCommunicator(graph, ages, steps, columns, kernel=kernel)


def clock(
    model: TimeModel,
    graph: Any,
    steps: int,
    payload: float,
    lag: int = 0,
    asynchronous: bool = False,
    talks: Callable[[int], str] | None = None,
    stale: tuple[int, int] | None = None,
) -> np.ndarray:
    """``(steps + 1,)`` simulated seconds at which step ``t`` is done (module docstring);
    ``payload``: bytes of one message; ``talks(t)``: what step ``t`` sends (``"gossip"``,
    ``"none"``, ``"all"``, or ``"gossip+all"`` for a gossip round, then an all-reduce;
    gossip on every step without it); ``stale``: ``(tau, S)`` of bounded staleness
    (:func:`staleness`), simulated by :func:`stale_timeline`."""
    if stale is not None:
        return stale_timeline(model, graph, steps, payload, *stale).clock
    n = graph.n
    c = compute_times(model, n, steps)
    one = model.message_seconds(payload)
    if asynchronous:
        return _own_pace(model, n, steps, one)
    period = getattr(graph, "period", 1)  # None: a schedule that never repeats
    reads = cache(partial(_reads, graph))  # by round of the period
    T = np.zeros(n)
    ready = np.zeros((steps, n))
    out = np.zeros(steps + 1)
    everyone = 2 * (n - 1) * model.message_seconds(payload / n) if n > 1 else 0.0
    for t in range(steps):
        ready[t] = T + c[t]
        T = ready[t]  # what the step awaits, in order ("none": nothing)
        for kind in (talks(t) if talks is not None else "gossip").split("+"):
            if kind == "all":  # every agent waits for the all-reduce
                T = np.full(n, T.max() + everyone)
            elif kind == "gossip" and t >= lag:  # (before: the initial values, known to all)
                mask = reads(t % period if period else t)
                sending = mask.sum(axis=0) * one  # j's messages of the round, one after the other
                arrive = np.where(mask, (ready[t - lag] + sending)[None, :], 0.0).max(axis=1)
                T = np.maximum(T, arrive)
        out[t + 1] = T.max()
    return out


def _seconds(
    model: TimeModel,
    graph: Any,
    algorithm: Any,
    steps: int,
    total_bytes: float,
    messages: float,
    columns: int = 1,
) -> np.ndarray:
    """:func:`clock` of a run whose busiest agents sent ``total_bytes`` in ``messages``
    (their totals over ``columns``): one gossip message's payload is their share (0 where no
    message went out). A method's exact averages (``talks(t) == "all"``) were counted as
    ring all-reduces, ``2 (n - 1)`` messages of ``1/n`` of the payload each; they are taken
    out."""
    method = as_method(algorithm)
    n = graph.n
    kinds = (method.talks(t).split("+") for t in range(steps))
    reduces = 2 * (n - 1) * sum(kind.count("all") for kind in kinds)
    share = messages - reduces + reduces / n
    payload = total_bytes / share / columns if share > 0 else 0.0
    return clock(model, graph, steps, payload, *method.pace, method.talks, staleness(method))


def timed(result: Any, model: TimeModel, graph: Any, algorithm: Any) -> Any:
    """``result`` with its :attr:`~decentopt.driver.result.Result.clock` under ``model``: one
    message's payload is the run's bytes per message of one column (a repetition)."""
    stats = result.comm
    steps = int(result.steps.max(initial=0))
    busiest = (stats.busiest_bytes, stats.busiest_messages, result.columns)
    result.clock = _seconds(model, graph, algorithm, steps, *busiest)
    return result


def clock_rows(rows: list[dict[str, Any]], model: TimeModel, graph_of: Any, method_of: Any) -> None:
    """Add ``sim_time`` to result rows, per algorithm label: ``graph_of(label)`` and
    ``method_of(label)`` give its graph and method; the payload of a message is the rows'
    bytes per message of the busiest agent."""
    by_label: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_label.setdefault(row["algorithm"], []).append(row)
    for label, mine in by_label.items():
        last = max(mine, key=lambda r: r["step"])
        busiest = (last["busiest_bytes"], last["busiest_messages"])
        steps = int(last["step"])
        seconds = _seconds(model, graph_of(label), method_of(label), steps, *busiest)
        for row in mine:
            row["sim_time"] = float(seconds[int(row["step"])])
