"""Compression operators: wire format = vectorised form, byte counts, contraction, parsing."""

from __future__ import annotations

import math

import pytest
import torch

from decentopt import compression
from decentopt.compression import COMPRESSORS, parse

SPECS = [
    "none",
    "top_k(0.3)",
    "random_k(0.3)",
    "qsgd(2)",
    "qsgd(7)",
    "sign",
    "random_k(0.5, seed=3)",
]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_decode_of_encode_is_the_vectorised_operator(spec, dtype):
    codec = parse(spec)
    z = torch.randn(4, 3, 13, dtype=dtype, generator=torch.Generator().manual_seed(0))
    q = codec.compress(z, 5, 9)
    for a in range(4):
        data = codec.encode(z[a], 5 + a, 9)
        assert data.dtype == torch.uint8
        assert data.numel() == codec.nbytes(3, 13, dtype)  # the count is what travels
        back = codec.decode(data, 5 + a, 9, 3, 13, dtype)
        assert torch.equal(back, q[a])


def test_bytes_per_row():
    k = 200
    assert parse("none").row_bytes(k, torch.float32) == 800
    assert parse("top_k(0.01)").row_bytes(k, torch.float32) == 2 * (4 + 4)
    assert parse("random_k(0.1)").row_bytes(k, torch.float64) == 20 * 8
    assert parse("qsgd(4)").row_bytes(k, torch.float32) == 4 + math.ceil(200 * 5 / 8)
    assert parse("sign").row_bytes(k, torch.float32) == 4 + 25
    # at least one entry, however small the ratio
    assert parse("top_k(0.001)").row_bytes(10, torch.float32) == 8


def test_top_k_keeps_the_largest_entries_and_is_a_contraction():
    z = torch.tensor([[[0.1, -3.0, 0.5, 2.0, -0.2]]])
    q = parse("top_k(0.4)").compress(z, 0, 0)
    assert torch.equal(q, torch.tensor([[[0.0, -3.0, 0.0, 2.0, 0.0]]]))
    x = torch.randn(50, 1, 40, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    err = (parse("top_k(0.25)").compress(x, 0, 0) - x).pow(2).sum(-1)
    assert bool((err <= (1 - 10 / 40) * x.pow(2).sum(-1) + 1e-12).all())  # delta = k/d


# qsgd(2) on 64 entries: tau = 1 + min(64 / 9, 8 / 3) = 11 / 3 (the formula, by hand)
@pytest.mark.parametrize(("spec", "delta"), [("random_k(0.25)", 0.25), ("qsgd(2)", 3 / 11)])
def test_random_operators_contract_in_expectation(spec, delta):
    """E||Q(x) - x||^2 <= (1 - delta) ||x||^2, averaged over rounds (independent draws)."""
    codec = parse(spec)
    assert codec.delta(64) == pytest.approx(delta)
    x = torch.randn(1, 1, 64, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    errors = torch.stack([(codec.compress(x, 0, r) - x).pow(2).sum() for r in range(400)])
    assert errors.mean() <= (1 - delta) * x.pow(2).sum() * 1.05


def test_draws_depend_on_agent_row_round_and_seed():
    codec = parse("random_k(0.25)")
    x = torch.randn(2, 2, 16, generator=torch.Generator().manual_seed(3))
    q = codec.compress(x, 0, 0)
    kept = (q != 0).to(torch.int64)
    assert not torch.equal(kept[0, 0], kept[1, 0])  # agents
    assert not torch.equal(kept[0, 0], kept[0, 1])  # rows
    assert not torch.equal(kept, (codec.compress(x, 0, 1) != 0).to(torch.int64))  # rounds
    other = parse("random_k(0.25, seed=1)")
    assert not torch.equal(kept, (other.compress(x, 0, 0) != 0).to(torch.int64))
    assert torch.equal(q, codec.compress(x, 0, 0))  # and only on them


def test_sign_scale_and_zero_vector():
    z = torch.tensor([[[1.0, -3.0, 0.0, 2.0]]])
    assert torch.equal(parse("sign").compress(z, 0, 0), torch.tensor([[[1.5, -1.5, 1.5, 1.5]]]))
    zero = torch.zeros(1, 1, 5)
    for spec in SPECS:
        assert torch.equal(parse(spec).compress(zero, 0, 0), zero)


@pytest.mark.parametrize("spec", SPECS)
def test_text_round_trip(spec):
    codec = parse(spec)
    assert parse(str(codec)) == codec
    assert parse(codec) is codec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topk(0.1)", "did you mean 'top_k'"),
        ("top_k(1.5)", r"in \(0, 1\]"),
        ("top_k(0)", r"in \(0, 1\]"),
        ("qsgd(0)", r"bits must be in \[1, 7\]"),
        ("qsgd(9)", r"bits must be in \[1, 7\] \(8 bits per entry with the sign\); got 9"),
        ("top_k(a)", "must be a real number"),
        ("top_k(0.1, 2)", "name the argument"),
        ("sign(ratio=0.1)", "unknown sign argument .ratio.; choose one of: seed"),
        ("top_k(", "NAME or NAME"),
    ],
)
def test_bad_text_names_the_fix(text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)
    with pytest.raises(TypeError, match="text such as"):
        parse(0.1)  # type: ignore[arg-type]


def test_registry_lists_every_operator():
    assert set(COMPRESSORS) == {"none", "top_k", "random_k", "qsgd", "sign"}
    gen = compression.generator_for(1, 2, 3, 4)
    assert torch.equal(
        torch.rand(3, generator=gen), torch.rand(3, generator=compression.generator_for(1, 2, 3, 4))
    )


@pytest.mark.parametrize("width", [1, 3, 5, 8])
def test_bit_packing_is_one_format_on_every_device(width):
    """numpy's packing (CPU) and the torch operations (accelerators) write the same bytes
    and read each other's, from aligned and unaligned slices of a message."""
    from decentopt.compression import _bits

    codes = torch.randint(0, 2**width, (1001,), generator=torch.Generator().manual_seed(width))
    data = _bits.pack(codes, width)
    assert torch.equal(data, _bits.pack_with_torch(codes, width))
    assert data.numel() == -(-1001 * width // 8)
    message = torch.cat([torch.zeros(3, dtype=torch.uint8), data])[3:]
    for read in (_bits.unpack, _bits.unpack_with_torch):
        assert torch.equal(read(message, width, 1001), codes)


def test_constructors_are_the_documented_names():
    """docs/algorithms.md names top_k(r), random_k(r), qsgd(b), sign and none as members."""
    assert compression.top_k(0.1) == parse("top_k(0.1)")
    assert compression.random_k(0.3, seed=2) == parse("random_k(0.3, seed=2)")
    assert compression.qsgd(2) == parse("qsgd(2)")
    assert compression.qsgd() == parse("qsgd")
    assert compression.sign() == parse("sign")
    assert compression.none() == parse("none")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("top_k", r"give the ratio of entries kept, e.g. 'top_k\(0.1\)'"),
        ("top_k()", "give the ratio of entries kept"),
        ("random_k(seed=2)", "give the ratio of entries kept"),
        ("qsgd(4.5)", "bits must be a whole number; got float 4.5"),
        ("sign(3)", "sign takes no value in parentheses; write 'sign'"),
        ("qsgd(levels=3)", "unknown qsgd argument .levels.; choose one of: seed, bits"),
    ],
)
def test_a_missing_or_bad_argument_is_named(text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)


def test_kept_entries_round_up():
    """ceil(r k): top_k(0.3) of 13 entries keeps 4 (3.9 rounded up), not 3; r k integral
    stays as it is (0.3 of 10: 3) despite its floating-point error."""
    z = torch.randn(1, 1, 13, generator=torch.Generator().manual_seed(4))
    for spec in ("top_k(0.3)", "random_k(0.3)"):
        codec = parse(spec)
        assert int((codec.compress(z, 0, 0) != 0).sum()) == 4
        assert codec.delta(13) == pytest.approx(4 / 13)
        assert int((codec.compress(z[..., :10], 0, 0) != 0).sum()) == 3
    assert parse("top_k(0.3)").row_bytes(13, torch.float32) == 4 * 8


def test_qsgd_tau_is_the_papers_formula():
    """tau = 1 + min(k / s^2, sqrt(k) / s), s = 2^b - 1 (Koloskova et al. 2019, qsgd_s):
    by hand, the sqrt(k) branch for b = 2, k = 100 and the k branch for b = 4, k = 64."""
    assert parse("qsgd(2)").tau(100) == pytest.approx(1 + 10 / 3)  # min(100/9, 10/3)
    assert parse("qsgd(4)").tau(64) == pytest.approx(1 + 64 / 225)  # min(64/225, 8/15)
    assert parse("qsgd(1)").tau(4) == pytest.approx(3.0)  # min(4, 2)
    assert parse("qsgd(2)").delta(100) == pytest.approx(3 / 13)


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_qsgd_is_unbiased_before_its_rescaling(bits):
    """E[tau Q(x)] = x, tau from the formula (not the operator's): the quantiser rounds
    s|x_i|/||x|| up or down to a level in 0..s with the right chances. A unit vector is
    kept exactly (its entry sits on the top level s), at one bit too."""
    k, s = 8, 2**bits - 1
    tau = 1 + min(k / s**2, math.sqrt(k) / s)
    codec = parse(f"qsgd({bits})")
    unit = torch.zeros(1, 1, k, dtype=torch.float64)
    unit[..., 3] = 1.0
    torch.testing.assert_close(codec.compress(unit, 0, 0) * tau, unit)
    x = torch.randn(1, 1, k, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    draws = codec.compress(x.expand(800, 1, k), 0, 0) * tau  # 800 agents' own draws
    assert draws.abs().sum() > 0  # nothing quantised to zero throughout
    se = draws.std(0) / math.sqrt(draws.shape[0])
    assert bool(((draws.mean(0) - x).abs() <= 5 * se + 1e-12).all())


def test_delta_of_each_operator():
    """Exact values: the contraction holds with equality for top_k on equal magnitudes,
    and for sign it is ||x||_1^2 / (k ||x||^2), at least 1/k."""
    k = 40
    assert parse("none").delta(k) == 1.0
    assert parse("top_k(0.25)").delta(k) == 0.25
    assert parse("sign").delta(k) == 1 / k
    x = torch.randn(200, 1, k, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    err = (parse("sign").compress(x, 0, 0) - x).pow(2).sum(-1)
    exact = x.pow(2).sum(-1) - x.abs().sum(-1).pow(2) / k
    torch.testing.assert_close(err, exact)
    assert bool((err <= (1 - 1 / k) * x.pow(2).sum(-1)).all())


def test_qsgd_stream_is_uniform_distinct_and_reproducible():
    """The counter-based stream of qsgd's rounding (a hash of the row's key and the entry's
    index, computed alike by the C kernels): uniform on [0, 1) in its mean, variance and
    deciles, distinct within a row, the same for the same key and unrelated across keys."""
    from decentopt.compression._bits import row_keys, uniforms

    keys = row_keys(0, range(4), range(3), 7)
    u = uniforms(keys, 50_000)
    assert u.shape == (4, 3, 50_000) and u.dtype == torch.float64
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    flat = u.reshape(-1)
    n = flat.numel()
    assert abs(float(flat.mean()) - 0.5) < 5 * math.sqrt(1 / 12 / n)
    assert abs(float(flat.var()) - 1 / 12) < 5 * math.sqrt(1 / 180 / n)
    deciles = torch.histc(flat, bins=10, min=0, max=1) / n
    assert bool(((deciles - 0.1).abs() < 5 * math.sqrt(0.09 / n)).all())
    assert all(row.unique().numel() == row.numel() for row in u.reshape(-1, 50_000))
    assert torch.equal(u, uniforms(row_keys(0, range(4), range(3), 7), 50_000))
    pairs = torch.corrcoef(u.reshape(12, -1))  # rows of different keys: uncorrelated
    off = pairs[~torch.eye(12, dtype=torch.bool)]
    assert float(off.abs().max()) < 5 / math.sqrt(50_000)
    lag = torch.corrcoef(torch.stack([flat[:-1], flat[1:]]))[0, 1]  # neighbours in a row
    assert abs(float(lag)) < 5 / math.sqrt(n)


@pytest.mark.parametrize("bits", [2, 4])
def test_qsgd_variance_is_within_its_bound(bits):
    """E||tau Q(x) - x||^2 <= min(k / s^2, sqrt(k) / s) ||x||^2 (QSGD's variance bound),
    over independent rounds of the stream, with the sampling error's margin."""
    k, s = 64, 2**bits - 1
    codec = parse(f"qsgd({bits})")
    x = torch.randn(1, 1, k, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    draws = torch.cat([codec.compress(x, 0, r) for r in range(600)]) * codec.tau(k)
    errors = (draws - x).pow(2).sum(-1)
    bound = min(k / s**2, math.sqrt(k) / s) * float(x.pow(2).sum())
    assert float(errors.mean()) <= bound * 1.1
    se = draws.std(0) / math.sqrt(draws.shape[0])
    assert bool(((draws.mean(0) - x).abs() <= 5 * se + 1e-12).all())  # unbiased


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_k_breaks_ties_by_the_lowest_indices(dtype):
    """Among equal magnitudes at the threshold the lowest indices are kept, on the wire
    too; a NaN ranks above every number."""
    row = torch.tensor([[[1.0, -1.0, 1.0, 2.0, -1.0, 1.0, 0.5]]], dtype=dtype)
    codec = parse("top_k(0.4)")  # 3 of 7: the 2, then the first two of the five 1s
    want = torch.tensor([[[1.0, -1.0, 0.0, 2.0, 0.0, 0.0, 0.0]]], dtype=dtype)
    assert torch.equal(codec.compress(row, 0, 0), want)
    assert torch.equal(codec.decode(codec.encode(row[0], 0, 0), 0, 0, 1, 7, dtype), want[0])
    nan = torch.tensor([[[1.0, float("nan"), 3.0, 0.0]]], dtype=dtype)
    assert torch.equal(
        parse("top_k(0.25)").mask(nan), torch.tensor([[[False, True, False, False]]])
    )
