"""Step-size schedules: callables from the iteration index ``t`` to ``alpha_t``.

An algorithm's ``lr`` is either a float (constant step) or any callable
``t -> float``; these frozen dataclasses cover the schedules of the paper's
experiments (multi-step decay with linear warm-up).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["LearningRate", "MultiStep", "Schedule", "lr_at", "validate_lr"]

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

    base: float
    milestones: Sequence[int] = ()
    gamma: float = 0.1
    warmup: int = 0

    def __post_init__(self) -> None:
        if not self.base > 0:
            raise ValueError(f"MultiStep.base must be > 0; got {self.base}")
        if not 0 < self.gamma <= 1:
            raise ValueError(f"MultiStep.gamma must be in (0, 1]; got {self.gamma}")
        if self.warmup < 0:
            raise ValueError(f"MultiStep.warmup must be >= 0; got {self.warmup}")
        object.__setattr__(self, "milestones", tuple(sorted(int(m) for m in self.milestones)))

    def __call__(self, t: int) -> float:
        decays = sum(1 for m in self.milestones if t >= m)
        scale = min(1.0, (t + 1) / self.warmup) if self.warmup else 1.0
        return self.base * self.gamma**decays * scale


def validate_lr(lr: LearningRate, owner: str) -> None:
    """Reject a non-positive or non-finite constant step size with a clear message."""
    if callable(lr):
        return
    if isinstance(lr, bool) or not isinstance(lr, int | float):
        raise TypeError(f"{owner}: lr must be a float or a schedule t -> float; got {lr!r}")
    if not (lr > 0 and lr < float("inf")):
        raise ValueError(f"{owner}: the step size lr must be a positive finite number; got {lr}")


def lr_at(lr: LearningRate, t: int) -> float:
    """The step size at iteration ``t``."""
    if callable(lr):
        value = float(lr(t))
        if not value > 0:
            raise ValueError(f"the step-size schedule returned {value} at t = {t}; it must be > 0")
        return value
    return float(lr)
