"""What ``decentopt methods`` prints: every registered method, built-in or from a plugin.

Each method is read from its class alone (what a plugin's author writes, see
``docs/extending.md``): the summary is the first paragraph of its docstring; the
reference its ``reference`` class attribute, else the docstring's ``Reference:``
paragraph; the hyper-parameters its dataclass fields with their defaults (an
alias's: its rule's and its gossip's); the graphs what the method needs of the
network (its rule's ``requires`` and its gossip's ``needs``) and ``needs_psd``; the
gossips it composes with :func:`decentopt.algorithms.gossips_for`.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass
from typing import Any

from decentopt.algorithms import registry
from decentopt.algorithms.gossips import parse
from decentopt.algorithms.registry import ALIASES, hyperparameters
from decentopt.plugins import MODULE_PREFIX

__all__ = ["MethodInfo", "describe", "render"]


@dataclass(frozen=True)
class MethodInfo:
    """One row of ``decentopt methods``."""

    name: str
    summary: str
    reference: str
    hyperparams: dict[str, Any]
    graphs: str
    gossips: list[str]
    origin: str


def _doc(cls: type) -> str:
    doc = cls.__dict__.get("__doc__") or ""
    # a dataclass without a docstring gets its signature as one: no description
    return "" if doc.startswith(f"{cls.__name__}(") else inspect.cleandoc(doc)


def _reference(cls: type, doc: str) -> str:
    own = getattr(cls, "reference", None)
    if isinstance(own, str) and own.strip():
        return " ".join(own.split())
    for paragraph in re.split(r"\n\s*\n", doc):
        if paragraph.lstrip().startswith(("Reference:", "References:")):
            return " ".join(paragraph.split(":", 1)[1].split())
    return ""


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return "required"


def describe(name: str) -> MethodInfo:
    """The facts ``decentopt methods`` shows of the registered method ``name``."""
    cls = registry.resolve(name)
    key = name.lower().replace("-", "_")
    doc = _doc(cls)
    alias = ALIASES.get(key)
    gossip = parse(alias.gossip if alias else "exact")
    fields = {f.name: f for part in (cls, type(gossip)) for f in dataclasses.fields(part)}
    hyperparams = {
        k: _default(fields[k]) for k in hyperparameters(key) if k not in ("gossip", "outer")
    }
    summary = " ".join(re.split(r"\n\s*\n", doc)[0].split())
    reference = _reference(cls, doc)
    # what the method needs of the network: its rule's own needs and its gossip's
    needs = frozenset(getattr(cls, "requires", ())) | gossip.needs
    if alias:  # a published pair: its rule's fields and its gossip's
        fixed = "".join(f", {k}={v!r}" for k, v in alias.fixed.items())
        summary = f"{cls.name}{fixed} with {gossip.name} gossip"
        reference = alias.reference
    graphs = ", ".join(registry.OFFERS.get(k, k) for k in registry.by_importance(needs))
    if getattr(cls, "needs_psd", False):
        graphs += ", positive semi-definite"
    return MethodInfo(
        name=key,
        summary=summary,
        reference=reference,
        hyperparams=hyperparams,
        graphs=graphs,
        gossips=registry.gossips_for(key),
        origin="built-in" if cls.__module__.startswith("decentopt.") else _origin(cls),
    )


def _origin(cls: type) -> str:
    try:
        file = inspect.getsourcefile(cls)
    except (TypeError, OSError):  # defined in __main__ or an interactive session
        file = None
    if cls.__module__.startswith(MODULE_PREFIX):  # loaded from a file: its name says nothing
        return f"plugin {file}"
    return f"plugin {cls.__module__}" + (f" ({file})" if file else "")


def render(selected: list[str] | None = None) -> str:
    """The text of ``decentopt methods [NAME ...]``: one block per method."""
    blocks = []
    for name in selected or registry.names():
        info = describe(name)
        hp = ", ".join(f"{k}={v!r}" for k, v in info.hyperparams.items())
        rows = [
            ("reference", info.reference or "(none given)"),
            ("hyper-parameters", hp or "(none)"),
            ("graphs", info.graphs),
            ("gossips", ", ".join(info.gossips)),
        ]
        if info.origin != "built-in":
            rows.append(("from", info.origin))
        head = f"{info.name}  {info.summary}".rstrip()
        blocks.append("\n".join([head, *(f"  {k:<17}{v}" for k, v in rows)]))
    return "\n\n".join(blocks)
