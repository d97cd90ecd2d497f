from __future__ import annotations

import pytest
import torch

import decentopt as dopt
from decentopt.comm import Communicator, SimulatedCommunicator


@pytest.mark.parametrize("kernel", ["dense", "sparse"])
@pytest.mark.parametrize("shape", [(70, 3), (70, 4, 5), (70, 2000)])
def test_kernels_compute_W_times_Z(kernel, shape):
    topo = dopt.topology.erdos_renyi(70, 0.05, seed=2)
    comm = SimulatedCommunicator(topo, kernel=kernel)
    Z = torch.randn(*shape)
    want = (topo.W @ Z.reshape(70, -1)).reshape(shape)
    torch.testing.assert_close(comm.mix(Z), want, rtol=1e-12, atol=1e-12)


def test_float32_and_auto_choice():
    topo = dopt.topology.ring(128)
    comm = SimulatedCommunicator(topo)
    assert comm.kernel_for(10) == "dense"
    assert comm.kernel_for(5000) == "sparse"
    assert SimulatedCommunicator(dopt.topology.ring(16)).kernel_for(10**6) == "dense"
    Z = torch.randn(128, 5000, dtype=torch.float32)
    out = comm.mix(Z)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, topo.W.float() @ Z, rtol=1e-5, atol=1e-5)


def test_counts_rounds_and_bytes():
    comm = SimulatedCommunicator(dopt.topology.ring(8))
    assert isinstance(comm, Communicator)
    comm.mix(torch.zeros(8, 3, 2))
    comm.mix(torch.zeros(8, 5))
    assert comm.stats.rounds == 2
    # 16 directed edges; rows of 6 and 5 float64 entries
    assert comm.stats.bytes_sent == 16 * (6 + 5) * 8
    comm.stats.reset()
    assert comm.stats.rounds == 0


def test_wrong_agent_axis_is_rejected():
    comm = SimulatedCommunicator(dopt.topology.ring(8))
    with pytest.raises(ValueError, match="agent axis first of size n = 8"):
        comm.mix(torch.zeros(3, 8))
    with pytest.raises(ValueError, match="kernel"):
        SimulatedCommunicator(dopt.topology.ring(8), kernel="fast")  # type: ignore[arg-type]


def test_mean_is_exact_average():
    comm = SimulatedCommunicator(dopt.topology.ring(5))
    Z = torch.randn(5, 3)
    torch.testing.assert_close(comm.mean(Z), Z.mean(0, keepdim=True))


def test_mix_many_is_one_round_of_separate_mixes():
    topo = dopt.topology.erdos_renyi(70, 0.05, seed=1)
    for kernel in ("dense", "sparse"):
        comm = SimulatedCommunicator(topo, kernel=kernel)
        a, b = torch.randn(70, 3, 4), torch.randn(70, 2000)
        ma, mb = comm.mix_many([a, b])
        torch.testing.assert_close(ma, (topo.W @ a.reshape(70, -1)).reshape(a.shape))
        torch.testing.assert_close(mb, topo.W @ b)
        assert comm.stats.rounds == 1
