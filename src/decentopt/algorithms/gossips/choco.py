"""CHOCO-gossip: compressed, error-compensated gossip (Koloskova, Stich & Jaggi, ICML 2019)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from decentopt._schema import bounded, prefixed
from decentopt.algorithms.gossips.base import Channel, Fields, Gossip
from decentopt.communicator import Communicator, Elementwise
from decentopt.compression import Compressor, Identity, parse, suggested_gamma
from decentopt.updates import FusedUpdate, add_scaled

__all__ = ["Choco", "FusesChoco", "public_copies"]


@runtime_checkable
class FusesChoco(Protocol):
    """A communicator that can run CHOCO's whole round in one kernel (the simulator's C
    kernels): ``(z + gamma (s' - hat'), hat', s')`` with ``hat' = hat + Q(z - hat)`` and
    ``s' = s + W Q(z - hat)`` (the C kernels compute it as ``W hat'``, the same while
    ``s = W hat``, which CHOCO keeps), or the reason it cannot, and then nothing is done. With
    ``descent = (g, alpha)`` the round is that of DSGD's update ``z - alpha g``, computed
    in the same kernel."""

    def choco_round(
        self,
        z: torch.Tensor,
        hat: torch.Tensor,
        s: torch.Tensor,
        compression: Any,
        gamma: float,
        descent: tuple[torch.Tensor, float] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | str: ...


def public_copies(x0: torch.Tensor) -> torch.Tensor:
    """Zero public copies, in float64 for a lower-precision iterate (where the device has
    float64): they add up every round's message, and under ED/EDM the rounding errors of
    that sum are integrated a second time by the correction ``X - psi``. In float32 that
    drift showed after a few thousand iterations (EDM's floor of 2e-5 grew to 3e-3 by
    12,000 iterations on Figure 1's problem); in float64 it does not."""
    wide = x0.dtype in (torch.float16, torch.bfloat16, torch.float32) and x0.device.type != "mps"
    return torch.zeros_like(x0, dtype=torch.float64 if wide else x0.dtype)


def _suffix(k: int) -> str:
    return "" if k == 0 else f"_{k}"


@dataclass(frozen=True)
class Choco(Gossip):
    """One round of CHOCO-gossip per step, for every tensor the rule sends.

    For each sent tensor ``Z`` the agents keep public copies ``X_hat`` (what the
    neighbours know of them) and ``S = W X_hat``; only the compressed differences travel:

    .. math::
        Q = \\mathcal{Q}(Z - \\hat X), \\qquad \\hat X^+ = \\hat X + Q, \\qquad
        S^+ = S + W Q, \\qquad \\text{mix}(Z) = Z + \\gamma (S^+ - \\hat X^+),
        \\qquad \\hat X^{(0)} = S^{(0)} = 0.

    With ``compression="none"`` and ``gamma = 1`` the mix is ``W Z`` exactly. The sum
    over agents of what is mixed is kept for any operator (``1^T (W - I) = 0``), so
    averages and trackers stay exact; once ``X_hat`` has caught up, the mix is
    ``W_gamma = (1 - gamma) I + gamma W`` (symmetric, doubly stochastic, positive
    semi-definite where ``W`` is). Several sent tensors travel in one message. Where
    the simulator's C kernels take the state, one tensor's round is one fused kernel
    that updates ``X_hat`` and ``S`` in place
    (:meth:`~decentopt.comm.SimulatedCommunicator.choco_round`): the state a step
    was given is consumed. For DSGD's update (``Z = X - alpha G``, CHOCO-SGD) that
    kernel computes ``Z`` where it reads it, without writing it.

    ``compression``: an operator of :mod:`decentopt.compression` or its text
    (``"top_k(0.1)"``, ``"qsgd(4)"``, ``"sign"``); ``gamma``: the consensus step in
    (0, 1], by default :func:`~decentopt.compression.suggested_gamma` of the operator (its
    ratio for a sparsifier, 1 with no compression or a quantiser). Exact diffusion (the
    rules that need a positive semi-definite W) with compression needs it given: no
    default converged for aggressive operators there (docs/algorithms.md).

    Reference: A. Koloskova, S. U. Stich, M. Jaggi, "Decentralized stochastic
    optimization and gossip algorithms with compressed communication", ICML 2019,
    Algorithm 2 (CHOCO-SGD) and Algorithm 1 (CHOCO-gossip).
    """

    compression: str | Compressor = "none"
    gamma: float | None = bounded(None, above=0, maximum=1, note="the consensus step")
    #: whether ``gamma`` was given (exact diffusion refuses the default), set in post-init
    gamma_given: bool = field(default=True, init=False, repr=False, compare=False)

    name: ClassVar[str] = "choco"
    needs: ClassVar[frozenset[str]] = frozenset({"symmetric", "static"})

    def __post_init__(self) -> None:
        super().__post_init__()
        with prefixed("choco"):
            codec = parse(self.compression)
        given = self.gamma is not None
        object.__setattr__(self, "gamma", self.gamma if given else suggested_gamma(codec))
        object.__setattr__(self, "gamma_given", given)
        object.__setattr__(self, "compression", codec)

    def refuses(self, rule: Any) -> str:
        why = super().refuses(rule)
        if why or self.gamma_given or isinstance(self.compression, Identity):
            return why
        if getattr(rule, "needs_psd", False):  # exact diffusion's correction
            return (
                f"compressed exact diffusion needs gamma given for {self.compression}: no "
                "default converges (on ring(32), d = 100, qsgd(4) converged for gamma from "
                "0.1 to 0.6; top_k(0.1) diverged from 0.02, qsgd(2) from 0.03, sign at 0.1; "
                "docs/algorithms.md); try a small gamma such as 0.01 and check it converges"
            )
        return ""

    def init(self, x0: torch.Tensor, sends: tuple[str, ...]) -> Fields:
        return {
            f"{n}{_suffix(k)}": public_copies(x0) for k in range(len(sends)) for n in ("x_hat", "s")
        }

    def bind(
        self, fields: Fields, comm: Communicator, x: torch.Tensor, sends: tuple[str, ...]
    ) -> _ChocoChannel:
        return _ChocoChannel(comm, fields, sends, self)

    def label(self) -> str:
        return f"choco({self.compression}, gamma={self.gamma:g})"


class _ChocoChannel(Channel):
    gossip: Choco

    def mix_map(
        self, fn: Elementwise, tensors: Sequence[torch.Tensor], scalars: Sequence[Any] = ()
    ) -> tuple[torch.Tensor, ...]:
        """DSGD's declared update (``descend``, a float step) and the round in one kernel
        where the communicator has one: ``x - alpha g`` is computed where the round reads
        it and never written. Any other update runs, then its first output is mixed."""
        descends = (
            isinstance(fn, FusedUpdate)
            and fn.kind == "descend"
            and isinstance(scalars[0], int | float)
            and tensors[1].shape == tensors[0].shape
            and tensors[1].dtype == tensors[0].dtype
            and len(self.sends) == 1
        )
        if not descends:
            return super().mix_map(fn, tensors, scalars)
        self._start_round()
        return (self._one(tensors[0], (tensors[1], float(scalars[0]))),)

    def round(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        if len(zs) == 1:
            return [self._one(zs[0], None)]
        return self._compressed(zs)

    def _one(self, z: torch.Tensor, descent: tuple[torch.Tensor, float] | None) -> torch.Tensor:
        """One tensor's round, decided once: the communicator's fused kernel where it has
        one for this state (with DSGD's update ``z - alpha g`` for ``descent = (g, alpha)``),
        else the update and the compressed mix."""
        if isinstance(self.comm, FusesChoco):
            codec: Compressor = self.gossip.compression  # type: ignore[assignment]  # parsed
            done = self.comm.choco_round(
                z, self.state["x_hat"], self.state["s"], codec, self.gossip.gamma, descent=descent
            )
            if not isinstance(done, str):
                out, self.state["x_hat"], self.state["s"] = done
                return out
        if descent is not None:  # DSGD's update, z - alpha g
            z = add_scaled(z, descent[0], -descent[1])
        return self._compressed([z])[0]

    def _compressed(self, zs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The round of ``zs`` through the communicator's compressed mix, in one message."""
        codec: Compressor = self.gossip.compression  # type: ignore[assignment]  # parsed
        hats = [self.state[f"x_hat{_suffix(k)}"] for k in range(len(zs))]
        diffs = [(z - h).to(z.dtype) for z, h in zip(zs, hats, strict=True)]
        # one message: the tensors stacked as more rows of the same length (one alone as it is)
        rows = [d if d.ndim > 1 else d.unsqueeze(-1) for d in diffs]
        sent = torch.stack(rows, dim=1) if len(rows) > 1 else rows[0].unsqueeze(1)
        q, wq = self.comm.mix_compressed(sent, codec)
        qs = [p.reshape(z.shape) for p, z in zip(q.unbind(1), zs, strict=True)]
        wqs = [p.reshape(z.shape) for p, z in zip(wq.unbind(1), zs, strict=True)]
        out = []
        for k, z in enumerate(zs):
            x_hat = hats[k] + qs[k]  # in x_hat's (possibly wider) dtype, as s
            s = self.state[f"s{_suffix(k)}"] + wqs[k]
            self.state[f"x_hat{_suffix(k)}"] = x_hat
            self.state[f"s{_suffix(k)}"] = s
            out.append(add_scaled(z, (s - x_hat).to(z.dtype), self.gossip.gamma))
        return out
