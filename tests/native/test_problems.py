"""The problems' native kernels: the logistic gradient's data term in one pass over the data."""

from __future__ import annotations

import pytest
import torch

from decentopt import native
from decentopt.native.problems import (
    logistic_data_term,
    logistic_term_and_loss,
    quadratic_gradient,
)
from decentopt.problems import Logistic, Quadratic

#: Forward error bounds, relative to sum_j |w_j a_jk| (the size of the sum's terms).
TOLERANCE = {torch.float32: 1e-6, torch.float64: 1e-13}
#: rows, m, d: odd sizes around the kernel's widths (4 columns, 4 samples, blocks of 64).
SHAPES = [(1, 1, 1), (3, 1, 5), (2, 7, 3), (5, 65, 13), (4, 130, 20), (2, 64, 8), (3, 9, 21)]


def library() -> native.Library:
    lib, why = native.library()
    if lib is None:
        pytest.skip(f"no native library: {why}")
    return lib


def sample(rows: int, m: int, d: int, dtype: torch.dtype, seed: int = 0, spread: float = 2.0):
    gen = torch.Generator().manual_seed(seed)
    data = torch.randn(rows, m, d, generator=gen, dtype=torch.float64).to(dtype)
    x = (spread * torch.randn(rows, d, generator=gen, dtype=torch.float64)).to(dtype)
    return data, x


def exact(data: torch.Tensor, x: torch.Tensor, scale: float):
    """The data term of the given (rounded) data and point in float64, and its size."""
    a, xd = data.double(), x.double()
    w = torch.sigmoid(-(a @ xd.unsqueeze(-1)).squeeze(-1)) * scale
    return (w.unsqueeze(-2) @ a).squeeze(-2), (w.abs().unsqueeze(-2) @ a.abs()).squeeze(-2)


def run(data, x, scale, threads, isa=None) -> torch.Tensor:
    out = torch.empty_like(x)
    suffix = "f32" if data.dtype == torch.float32 else "f64"
    fn = library().function("decentopt_logistic_gradient", suffix, isa)
    rows, m, d = data.shape
    args = (data.data_ptr(), 0, x.data_ptr(), out.data_ptr(), None, scale, threads)
    assert fn(rows, 1, rows, m, d, *args) == 0
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_data_term_is_the_sum_to_rounding(shape, dtype):
    library()
    data, x = sample(*shape, dtype)
    scale = -1.0 / shape[1]
    got = logistic_data_term(data, x, scale)
    assert got is not None and got.dtype == dtype and got.shape == x.shape
    want, size = exact(data, x, scale)
    assert ((got.double() - want).abs() <= TOLERANCE[dtype] * size).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_margins_far_out_give_weights_of_zero_and_one(dtype):
    library()
    data = torch.tensor([[[1.0], [-1.0], [1.0]]], dtype=dtype)
    for value in (800.0, 700.0, 30.0, 0.0, float("inf")):
        x = torch.tensor([[value]], dtype=dtype)
        got = logistic_data_term(data, x, 1.0)
        z = torch.tensor([value, -value, value], dtype=torch.float64)
        want = (torch.sigmoid(-z) * torch.tensor([1.0, -1.0, 1.0])).sum()
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double()[0, 0], want, rtol=TOLERANCE[dtype], atol=1e-300)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_result_depends_on_neither_threads_nor_instruction_set(dtype):
    lib = library()
    data, x = sample(7, 131, 11, dtype, seed=3)
    one = run(data, x, -1 / 131, 1)
    for threads in (2, 3, 7, 64):
        assert torch.equal(run(data, x, -1 / 131, threads), one)
    for isa in lib.variants:
        assert torch.equal(run(data, x, -1 / 131, 2, isa), one)
    previous = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            assert torch.equal(logistic_data_term(data, x, -1 / 131), one)
    finally:
        torch.set_num_threads(previous)


def test_what_the_kernel_does_not_take_is_left_to_torch():
    library()
    data, x = sample(2, 5, 3, torch.float64)
    assert logistic_data_term(data, x.float(), 1.0) is None  # mixed dtypes
    assert logistic_data_term(data.to(torch.bfloat16), x.to(torch.bfloat16), 1.0) is None
    assert logistic_data_term(data.transpose(-1, -2), x[:, :1].expand(2, 5), 1.0) is None
    assert logistic_data_term(data, x.requires_grad_(), 1.0) is None
    with torch.no_grad():
        assert logistic_data_term(data, x, 1.0) is not None
    assert logistic_data_term(data, x[:1], 1.0) is None  # a point per row
    assert logistic_data_term(data.unsqueeze(0), x.repeat(3, 1).unsqueeze(0), 1.0) is None
    assert logistic_data_term(data, x, 1.0, torch.ones(2, 4, dtype=data.dtype)) is None
    invalid = library().function("decentopt_logistic_gradient", "f64")
    assert invalid(-1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1.0, 1)  # groups < 0
    assert invalid(3, 1, 2, 1, 1, 0, 0, 0, 0, 0, 1.0, 1)  # groups not a multiple of the stride


@pytest.fixture
def without_library(monkeypatch):
    monkeypatch.setenv("DECENTOPT_NATIVE", "0")
    native.library.cache_clear()
    yield
    monkeypatch.undo()
    native.library.cache_clear()


@pytest.mark.parametrize("compute", [torch.float32, torch.float64])
def test_the_logistic_gradient_with_and_without_the_library(compute, request):
    library()
    prob = Logistic.paper(
        n=4, d=7, m=33, repetitions=3, sigma_s2=0.25, seed=1, compute_dtype=compute
    )
    x = torch.randn(4, 3, 7, generator=torch.Generator().manual_seed(2))
    fast = prob.full_gradient(x, exact=False)
    noisy = prob.gradient(x, torch.Generator().manual_seed(9))
    request.getfixturevalue("without_library")
    assert logistic_data_term(prob._U_fast, x.to(compute), 1.0) is None
    torch_fast = prob.full_gradient(x, exact=False)
    U, v = prob._U_fast, prob._v_fast
    assert torch.equal(
        torch_fast, prob._torch_data_term(U, v, x.to(compute)).double() + prob.mu * x
    )
    vU = v.unsqueeze(-1) * U
    want, size = exact(vU, x.to(compute), -1.0 / prob.m)
    # torch sums float32 in float32: within 1e-5 of the terms' size; C within 1e-6
    assert ((torch_fast - prob.mu * x - want).abs() <= 10 * TOLERANCE[compute] * size).all()
    assert ((fast - prob.mu * x - want).abs() <= TOLERANCE[compute] * size).all()
    # the same noise: the generator is drawn from as before
    noise = noisy - fast
    torch_noise = prob.gradient(x, torch.Generator().manual_seed(9)) - torch_fast
    torch.testing.assert_close(noise, torch_noise, rtol=0, atol=1e-12)
    assert noise.abs().max() > 0.1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    ("agents", "shared", "levels", "m", "d"),
    [(3, 2, 3, 70, 20), (2, 1, 2, 9, 5), (1, 3, 1, 130, 13)],
)
def test_rows_sharing_samples_give_the_numbers_of_their_own_copies(
    dtype, agents, shared, levels, m, d
):
    """Levels that share samples and differ in labels: the kernel reads the samples once
    and its numbers equal, bit for bit, those of each row's own samples v u."""
    lib = library()
    gen = torch.Generator().manual_seed(5)
    u = torch.randn(agents, shared, m, d, generator=gen, dtype=torch.float64).to(dtype)
    rows = shared * levels
    v = torch.where(torch.rand(agents, rows, m, generator=gen) < 0.5, -1.0, 1.0).to(dtype)
    x = (2 * torch.randn(agents, rows, d, generator=gen, dtype=torch.float64)).to(dtype)
    own = (v.unsqueeze(-1) * u.repeat(1, levels, 1, 1)).contiguous()
    want = run(own.reshape(-1, m, d), x.reshape(-1, d), -1 / m, 1).reshape(x.shape)
    previous = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            assert torch.equal(logistic_data_term(u, x, -1 / m, v), want)
    finally:
        torch.set_num_threads(previous)
    fn = {
        isa: lib.function(
            "decentopt_logistic_gradient", "f32" if dtype == torch.float32 else "f64", isa
        )
        for isa in lib.variants
    }
    for isa, call in fn.items():
        out = torch.empty_like(x)
        assert (
            call(
                agents * shared,
                levels,
                shared,
                m,
                d,
                u.data_ptr(),
                v.data_ptr(),
                x.data_ptr(),
                out.data_ptr(),
                None,
                -1 / m,
                3,
            )
            == 0
        )
        assert torch.equal(out, want), isa


# ------------------------------------------------------------ the quadratic's gradient
#: matrices, d: around the kernel's eight partial sums, and the block path's shapes.
QUADRATIC_SHAPES = [(1, 1), (3, 7), (2, 8), (5, 9), (4, 17), (320, 10), (6, 100)]


def quadratic_terms(count: int, d: int, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
            for shape in ((count, d, d), (count, d), (count, d), (count, d))]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", QUADRATIC_SHAPES)
def test_the_quadratic_gradient_is_the_product_to_rounding(shape, dtype):
    """``H x - b``: the product summed in float64 (within d units of 2^-53 of its terms'
    size, as the float64 reference itself), rounded once to ``dtype``; the term then
    added in ``dtype``: the kernel's result without it, plus the term, bit for bit."""
    library()
    H, x, b, term = quadratic_terms(*shape, dtype)
    got = quadratic_gradient(H, x, b)
    assert got is not None and got.dtype == dtype and got.shape == x.shape
    product = (H.double() @ x.double().unsqueeze(-1)).squeeze(-1) - b.double()
    size = (H.double().abs() @ x.double().abs().unsqueeze(-1)).squeeze(-1) + b.double().abs()
    bound = torch.finfo(dtype).eps / 2 * product.abs() + 2 * shape[1] * 2.0**-53 * size
    assert ((got.double() - product).abs() <= bound).all()
    with_term = quadratic_gradient(H, x, b, term)
    assert with_term is not None and torch.equal(with_term, got + term)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_quadratic_gradient_does_not_depend_on_threads_or_instruction_set(dtype):
    """Each matrix is one thread's and every variant sums in the same order: bit for bit."""
    lib = library()
    H, x, b, term = quadratic_terms(96, 100, dtype, seed=3)  # 960,000 entries: 4 threads
    suffix = "f32" if dtype == torch.float32 else "f64"
    results = []
    for isa in lib.variants:
        fn = lib.function("decentopt_quadratic_gradient", suffix, isa)
        for threads in (1, 2, 3, 4):
            out = torch.empty_like(x)
            args = (H.data_ptr(), x.data_ptr(), b.data_ptr(), term.data_ptr(), out.data_ptr())
            assert fn(96, 100, *args, threads) == 0
            results.append(out)
    assert all(torch.equal(r, results[0]) for r in results[1:])


def test_the_quadratic_gradient_declines_what_it_cannot_take():
    H, x, b, term = quadratic_terms(2, 3, torch.float32)
    assert quadratic_gradient(H.double(), x, b) is None  # mixed dtypes
    assert quadratic_gradient(H.half(), x.half(), b.half()) is None  # no half kernel
    assert quadratic_gradient(H[..., :2], x, b) is None  # not square
    assert quadratic_gradient(H, x, b, term[:1]) is None  # the term's shape
    assert quadratic_gradient(H.requires_grad_(), x, b) is None  # a gradient through it


def test_the_block_path_gradient_equals_the_torch_sum_to_rounding(request):
    """Quadratic.gradient_from in C and, with the library off, in torch: the same gradient
    to float32's rounding (the C sum is the more exact)."""
    library()
    problem = Quadratic.paper(n=8, repetitions=3, d=100, p=200, c=(0.5, 2.0), dtype=torch.float32)
    assert problem.H is not None
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(8, 6, 100, generator=gen)
    term = problem.noise_terms(problem.draw(1, gen))[0]
    fast = problem.gradient_from(x, term)
    request.getfixturevalue("without_library")
    assert quadratic_gradient(problem.H, x, problem.b, term) is None
    torch.testing.assert_close(fast, problem.gradient_from(x, term), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("spread", [0.5, 2.0, 40.0, 400.0])
def test_the_loss_is_the_softplus_sum_to_rounding(dtype, spread):
    """``sum_j log(1 + e^{-z_j})`` from the gradient's pass, against float64's
    ``logaddexp(0, -z)``, margins from small to far beyond the exponential's range (where
    the loss is ``-z`` itself, or 0); the data term is the same with or without it."""
    library()
    data, x = sample(5, 70, 13, dtype, seed=4, spread=spread)
    both = logistic_term_and_loss(data, x, -1 / 70)
    assert both is not None
    term, loss = both
    assert loss.dtype == torch.float64 and loss.shape == (5,)
    assert torch.equal(term, logistic_data_term(data, x, -1 / 70))
    z = (data.double() @ x.double().unsqueeze(-1)).squeeze(-1)
    terms = torch.logaddexp(torch.zeros(()), -z)
    want = terms.sum(-1)
    assert ((loss - want).abs() <= 1e-15 * terms.abs().sum(-1) + 1e-300).all()


def test_the_logistic_metrics_with_and_without_the_library(request):
    """The metrics read the data once for the gradient and the objective at the mean: the
    gradient equal to full_gradient's, the objective torch's to rounding."""
    library()
    prob = Logistic.paper(n=4, d=7, m=33, repetitions=3, sigma_h2=(0.1, 10.0), seed=1)
    x = torch.randn(4, 6, 7, generator=torch.Generator().manual_seed(2))
    fast = prob.metrics(x)
    assert torch.equal(fast["grad_norm"], prob._global_gradient(x.mean(0)).pow(2).sum(-1))
    request.getfixturevalue("without_library")
    plain = Logistic.paper(n=4, d=7, m=33, repetitions=3, sigma_h2=(0.1, 10.0), seed=1)
    slow = plain.metrics(x)
    for key in fast:
        torch.testing.assert_close(fast[key], slow[key], rtol=1e-12, atol=1e-14)
    assert (fast["opt_gap"] > 0).all()
