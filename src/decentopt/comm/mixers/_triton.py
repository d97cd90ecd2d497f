"""The Triton kernels of :mod:`decentopt.comm.mixers.cuda` (imported only where Triton is).

```update_mix`` computes, for output row ``i`` and a block of columns,
``sum_q w_q y0[(i + o_q) mod n]`` where ``y0`` is the first output of the update
``KIND`` (0: the plain mix; 1-4: descend, momentum_descend, correct, edm), and
writes the update's other outputs of row ``i``. Arithmetic in ``ACC`` (float32, or
float64 for float64 states).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["update_mix"]


@triton.jit
def heavy_ball(m, g, damp, keep, NESTEROV: tl.constexpr):
    mn = g + damp * (m - g) + keep * m
    if NESTEROV:
        return mn, g + damp * (mn - g) + keep * mn
    return mn, mn


@triton.jit
def outputs(
    x_ptr,
    a_ptr,
    b_ptr,
    c_ptr,
    at,
    alpha,
    damp,
    keep,
    mask,
    KIND: tl.constexpr,
    NESTEROV: tl.constexpr,
    ACC: tl.constexpr,
):
    # the update KIND's outputs of the entries at (x where it has fewer)
    x = tl.load(x_ptr + at, mask=mask, other=0.0).to(ACC)
    if KIND == 0:  # the plain mix
        return x, x, x
    elif KIND == 1:  # descend: x - alpha g
        return x - alpha * tl.load(a_ptr + at, mask=mask, other=0.0).to(ACC), x, x
    elif KIND == 2:  # momentum_descend (x, m, g)
        m = tl.load(a_ptr + at, mask=mask, other=0.0).to(ACC)
        g = tl.load(b_ptr + at, mask=mask, other=0.0).to(ACC)
        mn, d = heavy_ball(m, g, damp, keep, NESTEROV)
        return x - alpha * d, mn, x
    elif KIND == 3:  # correct (x, psi, d)
        psi = tl.load(a_ptr + at, mask=mask, other=0.0).to(ACC)
        d = tl.load(b_ptr + at, mask=mask, other=0.0).to(ACC)
        step = x - alpha * d
        return step + (x - psi), step, x
    else:  # edm (x, psi, m, g)
        psi = tl.load(a_ptr + at, mask=mask, other=0.0).to(ACC)
        m = tl.load(b_ptr + at, mask=mask, other=0.0).to(ACC)
        g = tl.load(c_ptr + at, mask=mask, other=0.0).to(ACC)
        mn, d = heavy_ball(m, g, damp, keep, NESTEROV)
        step = x - alpha * d
        return step + (x - psi), step, mn


@triton.jit
def update_mix(
    x_ptr,
    a_ptr,
    b_ptr,
    c_ptr,
    out0_ptr,
    out1_ptr,
    out2_ptr,
    offsets_ptr,
    weights_ptr,
    scalars_ptr,
    n,
    d,
    KIND: tl.constexpr,
    NESTEROV: tl.constexpr,
    TERMS: tl.constexpr,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    # alpha and the heavy ball's damp and keep, in the state's precision (a float argument
    # would arrive as float32)
    alpha = tl.load(scalars_ptr).to(ACC)
    damp = tl.load(scalars_ptr + 1).to(ACC)
    keep = tl.load(scalars_ptr + 2).to(ACC)
    mask = cols < d
    acc = tl.zeros([BLOCK], dtype=ACC)
    for q in tl.static_range(TERMS):
        offset = tl.load(offsets_ptr + q)
        weight = tl.load(weights_ptr + q).to(ACC)
        at = ((row + offset) % n).to(tl.int64) * d + cols
        y, _, _ = outputs(
            x_ptr, a_ptr, b_ptr, c_ptr, at, alpha, damp, keep, mask, KIND, NESTEROV, ACC
        )
        acc += weight * y
    own = row.to(tl.int64) * d + cols
    tl.store(out0_ptr + own, acc.to(out0_ptr.dtype.element_ty), mask=mask)
    if KIND >= 2:  # the other outputs of this row
        _, y1, y2 = outputs(
            x_ptr, a_ptr, b_ptr, c_ptr, own, alpha, damp, keep, mask, KIND, NESTEROV, ACC
        )
        tl.store(out1_ptr + own, y1.to(out1_ptr.dtype.element_ty), mask=mask)
        if KIND == 4:
            tl.store(out2_ptr + own, y2.to(out2_ptr.dtype.element_ty), mask=mask)
