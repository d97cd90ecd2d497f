"""Compression operators for gossip: what a message carries instead of the full vector.

An operator ``Q`` maps each row (the last axis) of an agent's tensor to an
approximation that costs fewer bytes on the wire. CHOCO-gossip (Koloskova, Stich,
Jaggi, ICML 2019) needs ``Q`` to be a *contraction*: ``E||Q(x) - x||^2 <= (1 - delta)
||x||^2`` for some ``delta`` in ``(0, 1]``. Every operator here is one:

=============== ============================================= ========== =================
name            Q(x) for a row of k entries                   delta      bytes per row
=============== ============================================= ========== =================
``none``        x                                             1          k e
``top_k(r)``    the ``ceil(rk)`` entries of largest magnitude ``ceil(rk)   ``ceil(rk)(4+e)``
                                                              / k``
``random_k(r)`` ``ceil(rk)`` entries drawn at random (seeded) ``ceil(rk)   ``ceil(rk) e``
                                                              / k``
``qsgd(b)``     ``sign(x) ||x|| l / (s tau)``, ``l`` =        ``1/tau``  ``e +
                stochastic rounding of ``s|x|/||x||`` to                 ceil(k(b+1)/8)``
                ``0..s``, ``s = 2^b - 1``,
                ``tau = 1 + min(k/s^2, sqrt(k)/s)``
``sign``        ``(||x||_1 / k) sign(x)``                     ``||x||_1^2 ``e + ceil(k/8)``
                                                              / (k
                                                              ||x||^2)``
=============== ============================================= ========== =================

(``e``: bytes of one entry of the row's dtype; top-k sends 32-bit indices; random-k
sends none, the receiver draws the same indices.) ``qsgd`` is the rescaled quantiser
of the CHOCO paper (Alistarh et al.'s QSGD divided by ``tau``); a zero entry counts
as positive under ``sign``.

Top-k keeps, among equal magnitudes at its threshold, the lowest indices (a NaN
ranks above every number). Randomness is keyed by ``(seed, agent, row, round)``:
random-k's indices come from a generator seeded by the key, qsgd's uniforms from a
counter-based hash of the key and the entry's index (:func:`~._bits.uniforms`,
which the C kernels compute alike), so the simulator and a rank of
torch.distributed draw the same numbers, and a receiver can redraw a sender's
indices.

Each operator offers :meth:`Compressor.compress` (all rows of several agents, the
decoded values: what the simulator uses) and :meth:`~Compressor.encode` /
:meth:`~Compressor.decode` (one agent's rows as bytes: what torch.distributed
sends); ``decode(encode(x))`` equals ``compress(x)`` exactly (tested).

Build an operator with its constructor (``compression.top_k(0.1)``, ``random_k(0.01)``,
``qsgd(4)``, ``sign()``, ``none()``, each with an optional ``seed=``) or parse it from
text with :func:`parse`: ``"top_k(0.1)"``, ``"random_k(0.01)"``, ``"qsgd(4)"``,
``"sign"``, ``"none"``. The sparsifiers need their ratio (``"top_k"`` alone is refused);
``qsgd`` alone has 4 bits.

Every operator gives its contraction for rows of ``k`` entries, ``codec.delta(k)``, and
:func:`suggested_gamma` a consensus step that CHOCO-gossip converges with: the default
``gamma`` of the CHOCO methods.
"""

from __future__ import annotations

import dataclasses

from decentopt._schema import prefixed, read_call
from decentopt.compression._bits import generator_for
from decentopt.compression.operators import (
    COMPRESSORS,
    QSGD,
    Compressor,
    Identity,
    RandomK,
    ScaledSign,
    TopK,
)

__all__ = [
    "COMPRESSORS",
    "QSGD",
    "Compressor",
    "Identity",
    "RandomK",
    "ScaledSign",
    "TopK",
    "generator_for",
    "none",
    "parse",
    "qsgd",
    "random_k",
    "register_compressor",
    "sign",
    "suggested_gamma",
    "top_k",
]


#: The constructors (each with an optional ``seed=``): ``top_k(ratio)``, ``random_k(ratio)``,
#: ``qsgd(bits=4)``, ``sign()``, ``none()``.
top_k = TopK
random_k = RandomK
qsgd = QSGD
sign = ScaledSign
none = Identity


def suggested_gamma(codec: str | Compressor) -> float:
    """A consensus step ``gamma`` that CHOCO-gossip converges with for ``codec``, whatever
    the row length: a sparsifier's ratio (its ``delta``; CHOCO-SGD with top-k(0.1) and
    gamma = 1 diverges on ring(32)), and 1 for no compression and for the quantisers,
    whose error is spread over every entry (CHOCO-SGD measured stable with them at
    gamma = 1; ``tests/algorithms/test_compressed.py``). Koloskova et al.'s Theorem 2
    gives ``delta rho^2 / (16 rho + rho^2 + 4 b^2 + 2 rho b^2 - 8 rho delta)`` (``rho``
    the spectral gap, ``b = ||I - W||``): safe on any graph, and on ring(32) thousands
    of times smaller."""
    return float(getattr(parse(codec), "ratio", 1.0))


#: Class decorator: add a :class:`Compressor` under its ``name`` (a plugin's operator).
register_compressor = COMPRESSORS.register


def parse(spec: str | Compressor) -> Compressor:
    """An operator from text (``"top_k(0.1)"``, ``"qsgd(bits=4, seed=1)"``, ``"sign"``)
    or an operator itself."""
    if isinstance(spec, Compressor):
        return spec
    name, cls, kwargs = read_call(
        spec,
        COMPRESSORS,
        "compression",
        "'top_k(0.1)', 'qsgd(4)', 'sign', 'none'",
        "an operator of decentopt.compression",
    )
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING and f.name not in kwargs:
            raise ValueError(
                f"compression {spec!r}: give the {f.name} of entries kept, e.g. '{name}(0.1)'"
            )
    with prefixed(f"compression {spec!r}", into=ValueError):
        return cls(**kwargs)
