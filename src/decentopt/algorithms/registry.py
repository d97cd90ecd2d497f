"""Registry of algorithms by name: ``make("edm", lr=0.05, beta=0.9)``."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypeVar

from decentopt._checks import unknown_name

__all__ = ["PAPER_ORDER", "REGISTRY", "hyperparameters", "make", "names", "register", "resolve"]

REGISTRY: dict[str, type] = {}
T = TypeVar("T", bound=type)

#: The order in which the paper presents the methods (tables and plots use it).
PAPER_ORDER = ("dsgd", "dmsgd", "decentlam", "qg_dsgdm", "dsgt", "dsgt_hb", "ed", "edm")
#: Then the methods beyond the paper, by family: exact methods, compressed gossip,
#: push-sum over directed graphs, relaying over trees.
LATER_ORDER = (
    "extra", "nids", "mt", "choco_dsgd", "choco_ed", "choco_edm", "sgp", "push_diging", "relaysgd"
)  # fmt: skip


def _registrable(cls: type) -> str:
    """The name ``cls`` registers under; a one-line error names what a new class lacks."""
    who = cls.__qualname__
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(
            f"{who}: the name class attribute must be lower-case letters, digits and '_' "
            f'(names are looked up case-insensitively), e.g. name: ClassVar[str] = "my_method"; '
            f"got {name!r}"
        )
    if "__dataclass_fields__" not in cls.__dict__:
        raise TypeError(
            f"{who}: decorate it with @dataclass(frozen=True) below @register (its "
            "hyper-parameters are its dataclass fields)"
        )
    missing = [m for m in ("init", "step") if not callable(getattr(cls, m, None))]
    if missing:
        raise TypeError(f"{who}: define {' and '.join(missing)} (see docs/extending.md)")
    return name


def register(cls: T) -> T:
    """Class decorator: add an algorithm under its ``name`` class attribute."""
    name = _registrable(cls)
    if name in REGISTRY:
        taken = f"{REGISTRY[name].__module__}.{REGISTRY[name].__qualname__}"
        raise ValueError(
            f"an algorithm named {name!r} is already registered ({taken}); give "
            f"{cls.__qualname__} another name"
        )
    REGISTRY[name] = cls
    return cls


def names() -> list[str]:
    """Registered algorithm names: the paper's methods in its order, then any others."""
    order = PAPER_ORDER + LATER_ORDER
    known = [name for name in order if name in REGISTRY]
    return known + [name for name in REGISTRY if name not in order]


def resolve(name: str) -> type:
    """The registered class of ``name`` (case and ``-``/``_`` insensitive)."""
    key = str(name).lower().replace("-", "_")
    try:
        return REGISTRY[key]
    except KeyError:
        raise ValueError(unknown_name("algorithm", key, names())) from None


def hyperparameters(name_or_cls: str | type) -> tuple[str, ...]:
    """The hyper-parameters an algorithm accepts (its dataclass fields, not class constants)."""
    cls = resolve(name_or_cls) if isinstance(name_or_cls, str) else name_or_cls
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


def make(name: str, **hyperparams: Any) -> Any:
    """Instantiate a registered algorithm with the given hyper-parameters."""
    cls = resolve(name)
    valid = hyperparameters(cls)
    for key in hyperparams:
        if key not in valid:
            alias = ""
            if key == "momentum" and "beta" in valid:
                alias = " (momentum is called beta here)"
            raise TypeError(f"{name}: {unknown_name('hyper-parameter', key, valid)}{alias}")
    return cls(**hyperparams)
