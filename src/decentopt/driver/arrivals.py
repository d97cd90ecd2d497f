"""Bounded staleness as the ranks run it: which neighbour's message each agent uses, and when.

Under ``delayed(tau, staleness=S)`` over torch.distributed (:mod:`decentopt.comm.posted`)
each rank advances on its own clock. Agent ``i`` starts step ``t`` at ``T_i(t)`` and has
computed it at ``r_i(t) = T_i(t) + c_i(t)``; then it sends its message of step ``t``, which
reaches a neighbour ``s_j`` later (``j``'s messages of a round leave one after the other:
the time model's link time), so ``a_j(s) = r_j(s) + s_j``. The values of the rounds before
the first (``s = -tau, ..., -1``, the initial iterates) leave with round 0's message, as a
rank posts them at its first round: ``a_j(s) = a_j(0)`` for ``s < 0``.

At step ``t`` agent ``i`` goes through its neighbours in the order of ``neighbors[i]``, as a
rank takes its messages. For neighbour ``j`` its clock ``u`` (from ``r_i(t)``) first waits
for the message of step ``max(t - S, -tau)`` (its first message at step 0),
``u <- max(u, a_j(max(t - S, -tau)))``; then it uses ``j``'s newest message of a step
``s <= t - tau`` that has arrived, ``a_j(s) <= u``. The age it used is
``delta_ij(t) = t - s``, so ``tau <= delta_ij(t) <= S``, and ``T_i(t+1)`` is ``u`` after
the last neighbour. With ``S = tau`` every age is ``tau`` and the clock is the plain
delay's, but for the wait at step 0 for the neighbours' first messages.

The functions here work on arrays (compute times, link times); the time model supplies
them (:func:`decentopt.driver.timeline.stale_timeline`). The same arrays give the same
ages and clock, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["StaleRun", "neighbour_slots", "stale_run"]


class StaleRun(NamedTuple):
    """``clock``: ``(steps + 1,)`` seconds at which every agent has done step ``t``
    (``max_i T_i(t)``); ``ages``: ``(steps, n, K)`` the age ``delta_ij(t)`` of the message
    agent ``i`` used from its ``k``-th neighbour (``slots[i, k]``; 0 for an empty slot);
    ``slots``: ``(n, K)`` the neighbours in the order a rank takes them (-1: none);
    ``done``: ``(steps + 1, n)`` each agent's ``T_i(t)``."""

    clock: np.ndarray
    ages: np.ndarray
    slots: np.ndarray
    done: np.ndarray


def neighbour_slots(neighbors: Sequence[Sequence[int]]) -> np.ndarray:
    """``(n, K)``: agent ``i``'s neighbours in order, padded with -1."""
    width = max((len(peers) for peers in neighbors), default=0)
    slots = np.full((len(neighbors), width), -1, dtype=np.int64)
    for i, peers in enumerate(neighbors):
        slots[i, : len(peers)] = peers
    return slots


def stale_run(
    compute: np.ndarray, slots: np.ndarray, send: np.ndarray, tau: int, bound: int
) -> StaleRun:
    """The ranks' run under ``delayed(tau, staleness=bound)`` (module docstring).

    Args:
        compute: ``(steps, n)`` seconds agent ``i`` computes step ``t``.
        slots: ``(n, K)`` the neighbours each agent reads, in order (:func:`neighbour_slots`).
        send: ``(n,)`` seconds from when agent ``j`` has computed a step until its message
            of that step reaches the agents that read it.
        tau, bound: the delay and the staleness bound, ``1 <= tau <= bound``.
    """
    if not 1 <= tau <= bound:
        raise ValueError(f"stale_run needs 1 <= tau <= bound; got tau = {tau}, bound = {bound}")
    steps, n = compute.shape
    ready = np.zeros((steps, n))  # r_j(t)
    done = np.zeros((steps + 1, n))  # T_i(t)
    ages = np.zeros((steps, n, slots.shape[1]), dtype=np.int64)
    rows = np.arange(n)
    span = np.arange(tau, bound + 1)  # the ages a message may have, newest first
    for t in range(steps):
        ready[t] = done[t] + compute[t]
        clock = ready[t].copy()
        for k in range(slots.shape[1]):
            j = slots[:, k]
            has = j >= 0
            peer = np.where(has, j, rows)
            # a_j(s) of the steps it may use, s = t - age (clipped to the first message)
            candidates = np.maximum(t - span, -tau)
            arrive = ready[np.maximum(candidates, 0)][:, peer].T + send[peer][:, None]
            waited = arrive[:, -1]  # age ``bound`` (or the first message): waited for
            clock = np.where(has, np.maximum(clock, waited), clock)
            arrived = arrive <= clock[:, None]  # the last column always has
            newest = np.argmax(arrived, axis=1)  # first True: the smallest age
            age = t - candidates[newest]
            ages[t, :, k] = np.where(has, age, 0)
        done[t + 1] = clock
    return StaleRun(done.max(axis=1, initial=0.0), ages, slots, done)
