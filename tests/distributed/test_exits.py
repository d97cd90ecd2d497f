"""Ranks end cleanly on every path: with delayed gossip under bounded staleness, a rank whose
neighbour was killed, fell silent or ran slow, or that skipped ``finalize()``, exits with its
own code and at most one line -- never SIGABRT from a waiter thread still inside a gloo wait
at interpreter shutdown -- and unequal step counts are named as such, not as a death."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.test_distributed import free_port, rank_env

pytestmark = pytest.mark.slow  # four processes each

WORKER = Path(__file__).with_name("exit_worker.py")
STALE = "delayed(1, staleness=3)"


def run_ranks(mode: str, gossip: str = STALE, world: int = 4) -> list[tuple[int, str]]:
    """Each rank's exit code and output."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = rank_env(rank, world, port, GOSSIP=gossip)
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), mode],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        return [(p.wait(timeout=90), p.communicate()[0]) for p in procs]
    finally:
        for p in procs:
            p.kill()


def clean(results: list[tuple[int, str]], codes: set[int]) -> None:
    """Every rank exits with one of ``codes``, printing at most one line, no abort."""
    for rank, (code, text) in enumerate(results):
        assert "terminate called" not in text and code in codes, (rank, code, text[-1500:])
        assert len(text.strip().splitlines()) <= 1, (rank, text[-1500:])


@pytest.mark.parametrize("mode", ["kill", "hang"])
def test_a_dead_or_silent_neighbour_under_staleness_ends_each_rank_with_one_line(mode):
    results = run_ranks(mode)
    assert results[3][0] == 17
    clean(results[:3], {0, 3})
    for rank in (0, 2):  # rank 3's neighbours name it, once
        code, text = results[rank]
        assert code == 3 and f"error: rank {rank}: neighbour 3 " in text, text
        assert text.count("neighbour") == 1 and text.count("died, hung or disconnected") == 1
        if mode == "hang":
            assert "sent no message within 2 s" in text and "closed the link" not in text


@pytest.mark.parametrize("mode", ["slow", "nofinal"])
def test_a_slow_rank_or_one_without_finalize_exits_normally(mode):
    results = run_ranks(mode)
    clean(results, {0})
    if mode == "nofinal":  # the library closed the group before interpreter shutdown
        assert [text.strip() for _, text in results] == ["group open at exit: False"] * 4


@pytest.mark.parametrize("gossip", ["exact", "delayed(1)"])
def test_a_rank_without_finalize_closes_its_group_before_shutdown(gossip):
    """Left to interpreter shutdown, gloo's threads may abort a finished process (exit code
    134); the communicator's exit hook closes the group while Python is whole."""
    results = run_ranks("nofinal", gossip)
    clean(results, {0})
    assert [text.strip() for _, text in results] == ["group open at exit: False"] * 4


@pytest.mark.parametrize("gossip", ["exact", "delayed(1)", STALE])
def test_unequal_step_counts_are_named_not_taken_for_a_death(gossip):
    """Rank 0 calls step() 11 times, the others 10: rank 0 says so (at its 11th step, or
    at finalize() under staleness); the others finish normally."""
    results = run_ranks("extra", gossip)
    clean(results, {0, 3})
    code, text = results[0]
    assert code == 3, text
    assert re.search(
        r"rank 0: neighbour [13] finished normally after 10 gossip rounds while this rank "
        r"made 11: the ranks called step\(\) a different number of times",
        text,
    ), text
    assert "died" not in text
    assert [c for c, _ in results[1:]] == [0, 0, 0]
