"""Registry of algorithms by name: ``make("edm", lr=0.05, beta=0.9)``."""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["PAPER_ORDER", "REGISTRY", "make", "names", "register"]

REGISTRY: dict[str, type] = {}
T = TypeVar("T", bound=type)

#: The order in which the paper presents the methods (tables and plots use it).
PAPER_ORDER = ("dsgd", "dmsgd", "decentlam", "qg_dsgdm", "dsgt", "dsgt_hb", "ed", "edm")


def register(cls: T) -> T:
    """Class decorator: add an algorithm under its ``name`` class attribute."""
    name = cls.name  # type: ignore[attr-defined]
    if name in REGISTRY:
        raise ValueError(f"an algorithm named {name!r} is already registered")
    REGISTRY[name] = cls
    return cls


def names() -> list[str]:
    """Registered algorithm names: the paper's methods in its order, then any others."""
    known = [name for name in PAPER_ORDER if name in REGISTRY]
    return known + [name for name in REGISTRY if name not in PAPER_ORDER]


def make(name: str, **hyperparams: Any) -> Any:
    """Instantiate a registered algorithm with the given hyper-parameters."""
    key = name.lower().replace("-", "_")
    try:
        cls = REGISTRY[key]
    except KeyError:
        raise ValueError(
            f"unknown algorithm {name!r}; choose one of {', '.join(names())}"
        ) from None
    try:
        return cls(**hyperparams)
    except TypeError as exc:
        fields = ", ".join(cls.__dataclass_fields__)
        raise TypeError(f"{name}: {exc}. Valid hyper-parameters: {fields}") from None
