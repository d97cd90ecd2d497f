"""The loop picks intra-op threads from the state's size and restores the caller's setting."""

from __future__ import annotations

import torch

import decentopt as dopt
from decentopt.driver import THREADS_CROSSOVER, intra_op_threads


def test_small_states_run_on_one_thread_and_the_setting_is_restored(monkeypatch):
    before = torch.get_num_threads()
    seen: list[int] = []
    prob = dopt.problems.Quadratic.paper(n=8, d=3, p=4, repetitions=2, seed=0)
    alg = dopt.algorithms.make("ed", lr=0.05)
    dopt.simulate(
        alg, prob, dopt.topology.ring(8), 3, progress=lambda _: seen.append(torch.get_num_threads())
    )
    assert seen == [1, 1, 1] and torch.get_num_threads() == before
    seen.clear()
    dopt.simulate(
        alg,
        prob,
        dopt.topology.ring(8),
        2,
        threads=2,
        progress=lambda _: seen.append(torch.get_num_threads()),
    )
    assert seen == [2, 2] and torch.get_num_threads() == before


def test_large_states_keep_torchs_threads_and_errors_restore_them():
    before = torch.get_num_threads()
    with intra_op_threads(None, THREADS_CROSSOVER) as chosen:
        assert chosen == before
    try:
        with intra_op_threads(1, 10):
            assert torch.get_num_threads() == 1
            raise RuntimeError("interrupted")
    except RuntimeError:
        pass
    assert torch.get_num_threads() == before
