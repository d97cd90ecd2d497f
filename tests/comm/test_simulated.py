from __future__ import annotations

import warnings

import numpy as np
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


def kernel_for(comm: SimulatedCommunicator, n: int, cols: int) -> str:
    return comm.mixer_for(torch.empty(n, cols)).name


def test_float32_and_auto_choice():
    topo = dopt.topology.ring(128)  # circulant: shift-and-add, no dense W
    comm = SimulatedCommunicator(topo)
    assert kernel_for(comm, 128, 10) == kernel_for(comm, 128, 5000) == "shift"
    assert kernel_for(comm, 128, 10**5) == "native"  # from 8 MB: the C kernels
    sparse = SimulatedCommunicator(dopt.topology.erdos_renyi(128, 0.03, seed=1))
    assert kernel_for(sparse, 128, 10) == "dense" and kernel_for(sparse, 128, 5000) == "sparse"
    small_ring = SimulatedCommunicator(dopt.topology.ring(16))
    assert kernel_for(small_ring, 16, 1000) == "dense"
    Z = torch.randn(128, 5000, dtype=torch.float32)
    out = comm.mix(Z)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, topo.W.float() @ Z, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "topo",
    [
        dopt.topology.ring(64),
        dopt.topology.ring(99, weights="metropolis"),
        dopt.topology.exponential(80),
        dopt.topology.ring(70).lazy(),
    ],
    ids=str,
)
def test_circulant_topologies_match_their_dense_form(topo):
    """Stencil, closed-form spectrum and shift mixing against the dense matrix."""
    W = topo.W.numpy()
    dense = dopt.topology.from_matrix(W)
    assert topo.lam == pytest.approx(dense.lam, abs=1e-12)
    assert topo.lam_min == pytest.approx(dense.lam_min, abs=1e-12)
    assert topo.neighbors == dense.neighbors
    Z = torch.randn(topo.n, 3, 2, dtype=torch.float64)
    shifted = SimulatedCommunicator(topo).mix(Z)
    torch.testing.assert_close(shifted, SimulatedCommunicator(dense).mix(Z), rtol=0, atol=1e-14)


def test_a_ring_of_100000_agents_needs_no_dense_matrix():
    topo = dopt.topology.ring(100_000)
    assert topo.lam == pytest.approx(0.5 + 0.5 * np.cos(2 * np.pi / 100_000), abs=1e-14)
    comm = SimulatedCommunicator(topo)
    Z = torch.randn(100_000, 10)
    out = comm.mix(Z)
    torch.testing.assert_close(out[5], 0.5 * Z[5] + 0.25 * (Z[4] + Z[6]))
    torch.testing.assert_close(out[0], 0.5 * Z[0] + 0.25 * (Z[-1] + Z[1]))
    with pytest.raises(MemoryError, match="GiB"):
        _ = topo.W


def test_circulant_assumption_checks():
    from decentopt.topology import AssumptionError
    from decentopt.topology.circulant import CirculantTopology

    with pytest.raises(AssumptionError, match=r"1\(3\)"):
        CirculantTopology(100, {0: 1 / 3, 1: 1 / 3, -1: 1 / 3}, "bad")  # even ring, -1/3
    with pytest.raises(AssumptionError, match="not connected"):
        CirculantTopology(100, {0: 0.5, 2: 0.25, -2: 0.25}, "two rings")
    with pytest.raises(AssumptionError, match="symmetric"):
        CirculantTopology(100, {0: 0.5, 1: 0.5}, "one way")


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


def test_large_graphs_are_stored_sparse_and_match_their_dense_form():
    from decentopt.topology.sparse import SparseTopology

    topo = dopt.topology.torus(1024)  # from SPARSE_FROM agents: CSR, sparse eigensolver
    assert isinstance(topo, SparseTopology) and topo.name.startswith("lazy(torus(32x32)")
    dense = dopt.topology.from_matrix(topo.W.numpy())
    assert topo.lam == pytest.approx(dense.lam, abs=1e-10)
    assert topo.lam_min == pytest.approx(dense.lam_min, abs=1e-10)
    assert topo.neighbors == dense.neighbors and topo.max_degree == 4
    Z = torch.randn(1024, 3, dtype=torch.float64)
    comm = SimulatedCommunicator(topo)
    assert kernel_for(comm, 1024, 3) == "csr"
    torch.testing.assert_close(comm.mix(Z), SimulatedCommunicator(dense).mix(Z), atol=1e-14, rtol=0)
    assert comm.stats.bytes_sent == 1024 * 4 * 3 * 8  # counted per edge, as before


def test_sparse_assumption_checks():
    import scipy.sparse as sp

    from decentopt.topology import AssumptionError
    from decentopt.topology.sparse import SparseTopology

    n = 1100
    ring = sp.diags([0.5, 0.25, 0.25, 0.25, 0.25], [0, 1, -1, n - 1, -(n - 1)], shape=(n, n))
    assert SparseTopology(ring, "ring").lam == pytest.approx(0.5 + 0.5 * np.cos(2 * np.pi / n))
    with pytest.raises(AssumptionError, match="not connected"):
        two = sp.block_diag([sp.identity(550)] * 2)
        SparseTopology(two, "two islands")
    with pytest.raises(AssumptionError, match=r"1\(3\)"):
        bipartite = sp.diags(
            [1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3], [0, 1, -1, n - 1, -(n - 1)], shape=(n, n)
        )
        SparseTopology(bipartite, "even metropolis ring")


def test_the_compiled_shift_kernel_equals_the_eager_one():
    topo = dopt.topology.ring(64)
    z = torch.randn(64, 3, 5, dtype=torch.float32)
    eager = SimulatedCommunicator(topo, kernel="shift").mix(z)
    comm = SimulatedCommunicator(topo, kernel="compiled")
    got = comm.mix(z)
    torch.testing.assert_close(got, eager, rtol=1e-6, atol=1e-6)
    out = torch.empty_like(z)
    comm.mix(z, out=out)
    torch.testing.assert_close(out, eager, rtol=1e-6, atol=1e-6)
    assert comm.stats.rounds == 2
    with pytest.raises(ValueError, match="needs a circulant topology"):
        SimulatedCommunicator(dopt.topology.star(8), kernel="compiled")
    # a ring of fewer than 64 agents is stored dense, and found circulant
    small = SimulatedCommunicator(dopt.topology.ring(8), kernel="compiled")
    z8 = torch.randn(8, 5)
    torch.testing.assert_close(small.mix(z8), dopt.topology.ring(8).W @ z8)


def test_a_failing_compile_of_the_mix_falls_back_to_the_shift_kernel(monkeypatch):
    def broken(fn, **kw):
        def call(*args):
            raise RuntimeError("no compiler here")

        return call

    monkeypatch.setattr(torch, "compile", broken)
    topo = dopt.topology.ring(64)
    z = torch.randn(64, 4, dtype=torch.float64)
    comm = SimulatedCommunicator(topo, kernel="compiled")
    with pytest.warns(RuntimeWarning, match="torch.compile of the mixing kernel failed"):
        got = comm.mix(z)
    torch.testing.assert_close(got, SimulatedCommunicator(topo, kernel="shift").mix(z))
    assert comm.mixers[0].failed
    with warnings.catch_warnings():  # warned once: later rounds go eagerly without a word
        warnings.simplefilter("error")
        torch.testing.assert_close(comm.mix(z), got)


def test_mix_refuses_integer_states_and_copies_an_overlapping_out():
    comm = SimulatedCommunicator(dopt.topology.ring(8))
    with pytest.raises(TypeError, match="floating-point tensor"):
        comm.mix(torch.arange(16).reshape(8, 2))
    topo = dopt.topology.ring(64)
    z = torch.randn(64, 2, 3)
    want = SimulatedCommunicator(topo).mix(z)
    for kernel in ("auto", "shift", "dense"):
        state = z.clone()
        SimulatedCommunicator(topo, kernel=kernel).mix(state, out=state)  # in place
        torch.testing.assert_close(state, want)
    # from 8 MB (the C kernels under "auto"): out a view overlapping z, shifted by a row
    big = torch.randn(65, 40_000, dtype=torch.float32)
    want = SimulatedCommunicator(topo, kernel="shift").mix(big[:64].clone())
    SimulatedCommunicator(topo).mix(big[:64], out=big[1:])
    torch.testing.assert_close(big[1:], want)
    with pytest.raises(ValueError, match="same shape and dtype"):
        comm.mix(torch.randn(8, 3), out=torch.empty(8, 3, dtype=torch.float32))


def test_an_empty_state_is_mixed_into_an_empty_state():
    from decentopt.native import library

    kernels = ("auto", "native") if library()[0] is not None else ("auto",)
    for topo in (dopt.topology.ring(8), dopt.topology.ring(64)):
        for kernel in kernels:
            out = SimulatedCommunicator(topo, kernel=kernel).mix(torch.empty(topo.n, 0))
            assert out.shape == (topo.n, 0)
