"""The optimizer on 4 gloo processes: overlapped equals blocking for every algorithm, wrap()
equals its counterpart, a GradScaler's skipped step keeps every rank in step, common
starts and averaged buffers."""

from __future__ import annotations

import pytest
import torch

from tests.distributed import worker
from tests.distributed.test_distributed import launch, wait_all

pytestmark = pytest.mark.slow  # four processes


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("optimizer")
    procs = launch("optimizer", out)
    codes = wait_all(procs, timeout=240)
    logs = [p.stdout.read().decode()[-3000:] for p in procs]
    assert codes == [0, 0, 0, 0], "\n".join(logs)
    return [torch.load(out / f"optimizer-rank{r}.pt") for r in range(4)]


@pytest.mark.parametrize("name", list(worker.VARIANTS))
def test_overlapped_buckets_equal_the_blocking_path_bit_for_bit(ranks, name):
    for r in ranks:
        assert torch.equal(r[f"{name}/overlap=True"], r[f"{name}/overlap=False"])
    assert not torch.equal(ranks[0][f"{name}/overlap=False"], ranks[1][f"{name}/overlap=False"])


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal to rounding: the base step travels as x - (x - y) (exact where a step does not
    cross zero or halve a parameter, Sterbenz; else within a unit in the last place)."""
    eps = torch.finfo(a.dtype).eps
    torch.testing.assert_close(a, b, rtol=16 * eps, atol=16 * eps * float(b.abs().max()))


def test_wrapping_sgd_as_dsgd_is_the_dsgd_optimizer(ranks):
    for r in ranks:
        close(r["wrap/sgd-dsgd"], r["dsgd"])


@pytest.mark.parametrize("how", ["dsgd", "edm", "dsgt", "sgp"])
def test_on_the_complete_graph_with_identical_data_wrapped_adamw_is_adamw(ranks, how):
    for r in ranks:
        close(r[f"adamw/{how}"], r["adamw/alone"])


def test_an_overflow_on_one_rank_makes_every_rank_skip_that_step(ranks):
    for r in ranks:
        assert torch.equal(r["scaler/overflow"], r["scaler/reference"])
    assert {float(r["scaler/scale"]) for r in ranks} >= {2.0**7}  # rank 1 backed off


def test_a_common_start_and_averaged_buffers(ranks):
    for r in ranks:
        assert torch.equal(r["broadcast"], ranks[0]["broadcast"])
        torch.testing.assert_close(r["buffers"], torch.full((4,), 1.5))
