"""Step-size schedules: callables from the iteration index ``t`` to ``alpha_t``.

An algorithm's ``lr`` is either a float (constant step) or any callable
``t -> float``; these frozen dataclasses cover the schedules of the paper's
experiments (multi-step decay with linear warm-up).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from decentopt._checks import as_real
from decentopt._schema import bounded, check_fields

__all__ = ["LearningRate", "MultiStep", "Schedule", "epoch_schedule", "lr_at", "validate_lr"]

Schedule = Callable[[int], float]
LearningRate = float | Schedule


@dataclass(frozen=True)
class MultiStep:
    """``base * gamma**k`` after the k-th milestone, with optional linear warm-up.

    .. math::
        \\alpha_t = \\alpha_0 \\, \\gamma^{|\\{m \\in M : m \\le t\\}|}
        \\cdot \\min(1, (t + 1) / T_w)

    Attributes:
        base: the step size after warm-up.
        milestones: iteration indices at which the step is multiplied by ``gamma``.
        gamma: decay factor.
        warmup: number of warm-up iterations (0 for none).
    """

    base: float = bounded(above=0)
    milestones: Sequence[int] = ()
    gamma: float = bounded(0.1, above=0, maximum=1)
    warmup: int = bounded(0, minimum=0)

    def __post_init__(self) -> None:
        check_fields(self, "MultiStep")
        object.__setattr__(self, "milestones", tuple(sorted(int(m) for m in self.milestones)))

    def __call__(self, t: int) -> float:
        decays = sum(1 for m in self.milestones if t >= m)
        scale = min(1.0, (t + 1) / self.warmup) if self.warmup else 1.0
        return self.base * self.gamma**decays * scale


def validate_lr(lr: object, owner: str) -> LearningRate:
    """A constant step size as a positive finite float, or a schedule (callable) unchanged.

    Any real number is accepted (``np.float32``, a 0-d tensor); a non-positive or
    non-finite step is refused with a clear message.
    """
    if callable(lr):
        return lr  # type: ignore[return-value]
    try:
        value = as_real(lr, f"{owner}: lr", finite=False)
    except TypeError:
        raise TypeError(
            f"{owner}: lr must be a real number or a schedule t -> float; got {lr!r}"
        ) from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{owner}: the step size lr must be a positive finite number; got {value}")
    return value


def lr_at(lr: LearningRate, t: int) -> float:
    """The step size at iteration ``t``; a schedule's value must be positive and finite."""
    if callable(lr):
        value = float(lr(t))
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(
                f"the step-size schedule returned {value} at t = {t}; it must be positive and "
                "finite"
            )
        return value
    return float(lr)


def epoch_schedule(
    lr: float,
    steps_per_epoch: int,
    *,
    milestones: Sequence[int] = (),
    gamma: float = 0.1,
    warmup_epochs: int = 0,
) -> MultiStep:
    """A step-indexed :class:`MultiStep` from epoch milestones and warm-up epochs."""
    return MultiStep(
        lr,
        milestones=tuple(m * steps_per_epoch for m in milestones),
        gamma=gamma,
        warmup=warmup_epochs * steps_per_epoch,
    )
