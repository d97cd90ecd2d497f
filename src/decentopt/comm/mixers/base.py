"""What a mixer is: one way of computing ``W z`` (and, where it can, an update fused with it).

A mixer is built once for a network by the communicator (``kernel=NAME`` picks
one, ``kernel="auto"`` a chain of them, see :func:`decentopt.comm.mixers.chain`)
and called on the folded ``(n, k)`` state of every gossip round:

* :meth:`Mixer.mix` returns ``W_t z`` (``t``: the round; a static graph ignores it);
* :meth:`Mixer.mix_map` evaluates an elementwise update and mixes its first output
  in one pass, where the mixer has a kernel for that update; ``None`` otherwise,
  and the communicator updates, then mixes;
* :meth:`Mixer.supports` says whether it can mix a state at all (device, dtype),
  :meth:`Mixer.preferred` whether ``"auto"`` should give it that state.

A new kernel is one module of this package: a :class:`Mixer` with these methods,
registered with :func:`register`. DSGD's ``descend``, DmSGD's ``momentum_descend``, ED's
``correct`` and EDM's ``edm_update`` (:data:`decentopt.updates.KINDS`) are the reference
of the fused kernels: the C kernels (:mod:`.native`) and the Triton kernels (:mod:`.cuda`)
compute each of them with the mix of its first output (:func:`prepare` says what they
launch), and the tests check they agree with it for every option.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypeVar

import torch

from decentopt._registry import Registry
from decentopt.updates import FusedUpdate

if TYPE_CHECKING:
    from decentopt.communicator import Elementwise
    from decentopt.topology import Network

__all__ = ["MIXERS", "Mixer", "MixerBase", "MixerUnavailable", "need", "prepare", "register"]


class MixerUnavailable(ValueError):
    """A mixer cannot serve this network (e.g. a circulant kernel for a random graph)."""


def need(network: Network, kind: type, kernel: str, what: str) -> None:
    """:class:`MixerUnavailable` unless ``network`` is a ``kind`` (``kernel`` needs ``what``)."""
    if not isinstance(network, kind):
        raise MixerUnavailable(f"kernel={kernel!r} needs {what}; {network.name} is not")


class Mixer:
    """One way of computing ``W_t z``, and the defaults: it mixes any state, is preferred
    whenever it can, and has no fused updates (a mixer overrides :meth:`mix` and what else
    it does better)."""

    name: ClassVar[str] = ""

    def supports(self, flat: torch.Tensor) -> str:
        """``""`` when this mixer can mix ``flat``; otherwise why not (one line)."""
        return ""

    def preferred(self, flat: torch.Tensor) -> bool:
        """Whether ``kernel="auto"`` should give ``flat`` to this mixer."""
        return not self.supports(flat)

    def mix(self, flat: torch.Tensor, out: torch.Tensor | None, t: int) -> torch.Tensor:
        """``W_t flat`` for a folded ``(n, k)`` state, into ``out`` when given."""
        raise NotImplementedError

    def mix_map(
        self, fn: Elementwise, flats: Sequence[torch.Tensor], scalars: Sequence[float], t: int
    ) -> list[torch.Tensor] | None:
        """``[W_t y_0, y_1, ...]`` for ``(y_0, ...) = fn(*flats, *scalars)`` in one pass, or
        ``None`` when this mixer has no fused kernel for ``fn`` and these states."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: What the mixers derive from: :class:`Mixer` itself.
MixerBase = Mixer


#: Every mixer by its ``kernel=`` name.
MIXERS: Registry[Callable[[Network], Mixer]] = Registry("mixing kernel")
M = TypeVar("M", bound=type)


def register(cls: M) -> M:
    """Class decorator: make ``kernel=cls.name`` build this mixer."""
    if cls.name == "auto":  # type: ignore[attr-defined]
        raise ValueError("a mixer needs a name other than 'auto' (the chain of them)")
    return MIXERS.register(cls)


@dataclass(frozen=True)
class FusedCall:
    """What a fusing mixer launches: the update (with its switches), its step size and
    momentum (0 without one), the inputs made contiguous and the outputs to fill."""

    update: FusedUpdate
    alpha: float
    beta: float
    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]


def prepare(
    fn: Callable[..., object], flats: Sequence[torch.Tensor], scalars: Sequence[float]
) -> FusedCall | None:
    """The fused call for ``fn`` on ``flats``, or ``None`` where no kernel computes it (an
    update no rule declared, other arity, or inputs of different shapes or dtypes)."""
    if not isinstance(fn, FusedUpdate):
        return None
    first = flats[0]
    if (
        len(flats) != fn.inputs
        or len(scalars) != len(fn.scalars)
        or any(f.shape != first.shape or f.dtype != first.dtype for f in flats)
    ):
        return None
    inputs = [f.contiguous() for f in flats]
    outputs = [torch.empty_like(inputs[0]) for _ in range(fn.outputs)]
    beta = float(scalars[1]) if len(scalars) > 1 else 0.0
    return FusedCall(fn, float(scalars[0]), beta, inputs, outputs)
