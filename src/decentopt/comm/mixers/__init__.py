"""Mixers: the kernels that compute ``W z``, one module each, registered by ``kernel=`` name.

* ``cuda``: Triton kernels, the circulant mix and DSGD/DmSGD/ED/EDM updates fused with
  it in one launch (:mod:`.cuda`); "auto": circulant ``W``, CUDA states, Triton there;
* ``native``: C kernels, the circulant mix and DSGD/DmSGD/ED/EDM updates fused with it
  (:mod:`.native`); "auto": circulant ``W``, CPU float32/float64 states from 8 MB;
* ``sparse``: per-agent neighbour sums over the non-zeros (:mod:`.rows`); "auto":
  sparse graphs stored dense, rows of at least 1024 columns;
* ``shift``: a sum of shifted copies for a circulant ``W`` (:mod:`.shift`); "auto":
  graphs stored by their stencil;
* ``csr``: ``torch.sparse.mm`` (:mod:`.csr`); "auto": graphs stored sparse;
* ``gather``: the round's ``W_t`` in gather form (:mod:`.gather`); "auto":
  time-varying graphs;
* ``dense``: one GEMM (:mod:`.dense`); "auto": everything else;
* ``compiled``: ``torch.compile`` of the circulant mix and of any update fused with it
  (:mod:`.compiled`); only when asked for.

:func:`chain` builds what a communicator mixes with: for ``kernel="auto"`` the
mixers of :data:`AUTO_ORDER` that apply to the network, of which each state goes
to the first that prefers it (the last always does); for a named kernel, that
mixer alone.
"""

from __future__ import annotations

from collections.abc import Callable

from decentopt.comm.mixers.base import MIXERS, Mixer, MixerBase, MixerUnavailable, register
from decentopt.comm.mixers.compiled import CompiledMixer
from decentopt.comm.mixers.csr import CSRMixer
from decentopt.comm.mixers.cuda import CudaMixer
from decentopt.comm.mixers.dense import DenseMixer
from decentopt.comm.mixers.gather import GatherMixer
from decentopt.comm.mixers.native import NativeMixer
from decentopt.comm.mixers.rows import SparseRowsMixer, dense_stored
from decentopt.comm.mixers.shift import ShiftMixer
from decentopt.topology import Network, TopologySchedule
from decentopt.topology.sparse import SparseTopology

__all__ = [
    "AUTO_ORDER",
    "MIXERS",
    "CSRMixer",
    "CompiledMixer",
    "CudaMixer",
    "DenseMixer",
    "GatherMixer",
    "Mixer",
    "MixerBase",
    "MixerUnavailable",
    "NativeMixer",
    "ShiftMixer",
    "SparseRowsMixer",
    "chain",
    "register",
]


#: ``kernel="auto"``: mixers in the order states are offered to them, each with the rule
#: that says whether it applies to a network at all.
AUTO_ORDER: tuple[tuple[str, Callable[[Network], bool]], ...] = (
    ("cuda", lambda net: not isinstance(net, TopologySchedule | SparseTopology)),
    ("native", lambda net: not isinstance(net, TopologySchedule | SparseTopology)),
    ("sparse", SparseRowsMixer.suits),
    ("shift", ShiftMixer.suits),
    ("csr", lambda net: isinstance(net, SparseTopology)),
    ("gather", lambda net: isinstance(net, TopologySchedule)),
    ("dense", dense_stored),
)


def chain(network: Network, kernel: str = "auto") -> tuple[Mixer, ...]:
    """The mixers a communicator of ``network`` uses (see the module docstring)."""
    if kernel != "auto":
        if kernel not in MIXERS:
            raise ValueError(
                f"kernel must be 'auto' or one of {', '.join(sorted(MIXERS))}; got {kernel!r}"
            )
        return (MIXERS[kernel](network),)
    found: list[Mixer] = []
    for name, applies in AUTO_ORDER:
        if name in MIXERS and applies(network):
            try:
                found.append(MIXERS[name](network))
            except MixerUnavailable:
                continue
    return tuple(found)
