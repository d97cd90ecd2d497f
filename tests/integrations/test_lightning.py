"""The Lightning strategy on two gloo processes: DecentralizedOptimizer's parameters, the
agents' mean in validation, and a resumed checkpoint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decentopt.integrations.loggers import MissingExtra

WORKER = Path(__file__).with_name("lightning_worker.py")


def test_without_lightning_the_strategy_is_refused_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightning", None)
    monkeypatch.delitem(sys.modules, "decentopt.integrations.lightning", raising=False)
    with pytest.raises(MissingExtra, match=r"pip install decentopt\[lightning\]$"):
        import decentopt.integrations.lightning  # noqa: F401


def test_checkpoint_files_are_one_per_rank():
    from decentopt.integrations.lightning import rank_path

    assert rank_path("a/b.ckpt", 0) == "a/b.ckpt" and rank_path("a/b.ckpt", 3) == "a/b.ckpt.rank3"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("lightning")
    command = [sys.executable, "-m", "decentopt", "launch", "-n", "2", str(WORKER), str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (out / "half.ckpt").is_file() and (out / "half.ckpt.rank1").is_file()
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal to rounding: the base step travels as x - (x - y) (see decentopt.distributed.wrap)."""
    eps = torch.finfo(a.dtype).eps
    torch.testing.assert_close(a, b, rtol=64 * eps, atol=64 * eps * float(b.abs().max()))


@pytest.mark.slow  # two processes
def test_a_module_under_the_strategy_steps_as_decentralized_optimizer(ranks):
    for r in ranks:
        close(r["strategy"], r["reference"])
    assert not torch.equal(ranks[0]["strategy"], ranks[1]["strategy"])  # agents, not replicas


@pytest.mark.slow
def test_validation_reports_the_agents_mean(ranks):
    for r in ranks:
        assert r["val"] == pytest.approx(r["mean_val"], rel=1e-6)
    assert ranks[0]["own_val"] != ranks[1]["own_val"]


@pytest.mark.slow
def test_a_checkpoint_resumes_each_agent_with_its_state(ranks):
    for r in ranks:
        torch.testing.assert_close(r["resumed"], r["strategy"], rtol=0, atol=0)
