"""Methods by name: ``make("edm", lr=0.05, beta=0.9, gossip="choco(qsgd(4), gamma=0.4)")``,
``make("dsgd", lr=0.1, outer="nesterov(lr=0.7, beta=0.9, every=8)")``.

:data:`REGISTRY` holds the update rules (each composes with the gossips it can take);
:data:`ALIASES` the published pairs of a rule and a gossip under their papers' names
(``sgp`` is DmSGD with push-sum gossip), which build exactly the composed method.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

from decentopt._checks import unknown_name
from decentopt._registry import Registry, check_name
from decentopt._schema import prefixed, read_call
from decentopt.algorithms.base import HyperParams
from decentopt.algorithms.gossips import GOSSIPS, Exact, Gossip, parse
from decentopt.algorithms.method import Method, as_method
from decentopt.algorithms.outer import Outer

__all__ = [
    "ALIASES",
    "OFFERS",
    "PAPER_ORDER",
    "REGISTRY",
    "Alias",
    "alias",
    "by_importance",
    "check_network",
    "compose",
    "gossips_for",
    "hyperparameters",
    "make",
    "names",
    "register",
    "resolve",
]

REGISTRY: Registry[type] = Registry("algorithm")
T = TypeVar("T", bound=type)

#: The order in which the paper presents the methods (tables and plots use it).
PAPER_ORDER = ("dsgd", "dmsgd", "decentlam", "qg_dsgdm", "dsgt", "dsgt_hb", "ed", "edm")
#: Then the methods beyond the paper, by family: exact methods, compressed gossip,
#: push-sum over directed graphs, relaying over trees, delayed and asynchronous methods.
LATER_ORDER = (
    "extra",
    "nids",
    "mt",
    "choco_dsgd",
    "choco_ed",
    "choco_edm",
    "sgp",
    "push_diging",
    "relaysgd",
    "osgp",
    "ad_psgd",
    "k_gt",
    "led",
)


@dataclass(frozen=True)
class Alias:
    """A published method that is a rule composed with a gossip: its name, the rule's
    name, the gossip in text, a note, and the rule's hyper-parameters the pair fixes. The
    gossip's parameters its text leaves out are the alias's own (``osgp``'s ``tau``)."""

    name: str
    rule: str
    gossip: str
    reference: str = ""
    fixed: dict[str, Any] = field(default_factory=dict)

    def parts(self) -> tuple[type[Gossip], dict[str, Any], tuple[str, ...]]:
        """The gossip's class, the arguments its text gives, and the ones left to the alias."""
        _, cls, given = read_call(self.gossip, GOSSIPS, "gossip", "'push_sum'", "a gossip")
        return cls, given, tuple(f for f in _init_fields(cls) if f not in given)


#: Published pairs by name (:func:`alias` adds one).
ALIASES: Registry[Alias] = Registry("alias")


def alias(name: str, rule: str, gossip: str, reference: str, **fixed: Any) -> None:
    """Name the pair of ``rule`` (with the hyper-parameters ``fixed``) and ``gossip`` (text)."""
    ALIASES.add(name, Alias(name, rule, gossip, reference, fixed))


alias("choco_dsgd", "dsgd", "choco", "CHOCO-SGD: Koloskova, Stich & Jaggi, ICML 2019, Algorithm 2")
alias("choco_ed", "ed", "choco", "ED with CHOCO-gossip (a construction of this library)")
alias("choco_edm", "edm", "choco", "EDM with CHOCO-gossip (a construction of this library)")
alias(
    "sgp",
    "dmsgd",
    "push_sum",
    "Stochastic Gradient Push: Assran, Loizou, Ballas & Rabbat, ICML 2019",
)
alias(
    "push_diging",
    "dsgt",
    "push_sum",
    "Push-DIGing: Nedić, Olshevsky & Shi, SIAM J. Optim. 2017",
    atc=False,
)
alias(
    "osgp",
    "dmsgd",
    "delayed(inner=push_sum)",
    "Overlap SGP: Assran, Loizou, Ballas & Rabbat, ICML 2019, Algorithm 3",
)


def register(cls: T) -> T:
    """Class decorator: add an update rule under its ``name`` class attribute (a one-line
    error names what a new class lacks, or the class that holds its name)."""
    who = cls.__qualname__
    name = check_name(
        getattr(cls, "name", None),
        f"{who}: the name class attribute must be",
        'name: ClassVar[str] = "my_method"',
    )
    if "__dataclass_fields__" not in cls.__dict__:
        raise TypeError(
            f"{who}: decorate it with @dataclass(frozen=True) below @register (its "
            "hyper-parameters are its dataclass fields)"
        )
    missing = [m for m in ("init", "step") if not callable(getattr(cls, m, None))]
    if getattr(cls, "step", None) is HyperParams.step and getattr(cls, "fused", None) is None:
        missing.append("step")  # the default step runs a declared fused update
    if missing:
        raise TypeError(f"{who}: define {' and '.join(missing)} (see docs/extending.md)")
    if name in REGISTRY or name in ALIASES:
        held = REGISTRY.get(name)
        taken = f"{held.__module__}.{held.__qualname__}" if held else ""
        taken = taken or f"the alias of {ALIASES[name].rule}"
        raise ValueError(
            f"an algorithm named {name!r} is already registered ({taken}); give {who} another name"
        )
    return REGISTRY.add(name, cls)


def names() -> list[str]:
    """Registered method names: the paper's methods in its order, then any others."""
    order = PAPER_ORDER + LATER_ORDER
    known = [name for name in order if name in REGISTRY or name in ALIASES]
    return known + [name for name in REGISTRY if name not in order]


def _key(name: object) -> str:
    key = str(name).lower().replace("-", "_")
    if key not in REGISTRY and key not in ALIASES:
        raise ValueError(unknown_name("algorithm", key, names()))
    return key


def resolve(name: str) -> type:
    """The update rule's class of ``name`` (an alias's rule; case and ``-``/``_`` insensitive)."""
    key = _key(name)
    return REGISTRY[ALIASES[key].rule] if key in ALIASES else REGISTRY[key]


def _init_fields(cls: Any) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


def hyperparameters(method: str | type | Any) -> tuple[str, ...]:
    """The hyper-parameters a method accepts: a name (its rule's and, for an alias, its
    gossip's; ``gossip`` for a rule; ``outer`` for both), a rule's class, or a method
    itself."""
    if isinstance(method, Method) and (method.alias or method.gossip != Exact()):
        return tuple(method.hyperparams())
    if isinstance(method, str):
        key = _key(method)
        if key in ALIASES:
            alias = ALIASES[key]
            own = tuple(f for f in _init_fields(REGISTRY[alias.rule]) if f not in alias.fixed)
            return (*own, *alias.parts()[2], "outer")
        method = REGISTRY[key]
    rule = method.rule if isinstance(method, Method) else method  # a class or an instance
    return (*_init_fields(rule), "gossip", "outer")


def compose(rule: Any, gossip: str | Gossip = "exact", alias: str = "") -> Method:
    """``rule`` with ``gossip``, or a one-line error saying why the pair cannot work."""
    with prefixed(rule.name):
        mixer = parse(gossip)
    why = mixer.refuses(rule)
    if why:
        works = ", ".join(gossips_for(rule.name)) or "exact"
        raise ValueError(f"{rule.name} cannot take {mixer.name} gossip: {why}; it takes: {works}")
    return Method(rule, mixer, alias)


def make(
    name: str,
    gossip: str | Gossip | None = None,
    outer: str | Outer | None = None,
    **hyperparams: Any,
) -> Method:
    """A registered method with the given hyper-parameters, composed with ``gossip``
    (text such as ``"choco(top_k(0.1), gamma=0.4)"`` or a gossip; exact mixing by default),
    under the outer optimizer ``outer`` (text such as
    ``"nesterov(lr=0.7, beta=0.9, every=8)"``; none by default)."""
    key = _key(name)
    valid = hyperparameters(key)
    for bad in (k for k in hyperparams if k not in valid):
        hint = " (momentum is called beta here)" if bad == "momentum" and "beta" in valid else ""
        raise TypeError(f"{key}: {unknown_name('hyper-parameter', bad, valid)}{hint}")
    if key not in ALIASES:
        method = compose(REGISTRY[key](**hyperparams), "exact" if gossip is None else gossip)
        return method.with_outer(outer)
    alias = ALIASES[key]
    cls, given, own = alias.parts()
    if gossip is not None:
        raise TypeError(
            f"{key} is {alias.rule} with {cls.name} gossip: give gossip= to {alias.rule} instead"
        )
    with prefixed(key):
        mixer = cls(**given, **{k: v for k, v in hyperparams.items() if k in own})
    rule_hp = {k: v for k, v in hyperparams.items() if k not in own} | alias.fixed
    return compose(REGISTRY[alias.rule](**rule_hp), mixer, alias=key).with_outer(outer)


#: What each capability of a network means, the most telling first.
OFFERS = {
    "tree": "a static tree",
    "symmetric": "a symmetric doubly stochastic W (Assumption 1)",
    "column": "a column-stochastic W (a directed graph, or an undirected one)",
    "static": "one fixed W",
}


def by_importance(needs: frozenset[str]) -> list[str]:
    """``needs`` in the order of :data:`OFFERS`, then any others (a plugin's) by name."""
    return [k for k in OFFERS if k in needs] + sorted(needs - OFFERS.keys())


def _network_fix(method: Any, missing: str, network: Any) -> str:
    if missing == "symmetric" and "column" in network.offers:
        if not method.alias and method.gossip == Exact():  # push-sum may serve the rule
            push = [g for g in gossips_for(method.name) if g.startswith("push_sum")]
            if push:
                return f"compose it with push-sum to run on a directed graph: gossip={push[0]!r}"
        return "give it an undirected graph (or run a push-sum method: sgp, push_diging)"
    return {
        "static": "give it a static graph (time-varying graphs change W every round)",
        "tree": "relaying needs exactly one path between any two agents: topology.chain, "
        "binary_tree, star or spanning_tree(graph)",
        "column": "give it a directed graph or an undirected one",
    }.get(missing, "")


def check_network(method: Any, network: Any) -> None:
    """Refuse a network that lacks what the method needs (its rule's and its gossip's
    declarations against the network's ``offers``), naming what is missing and the fix."""
    method = as_method(method)
    missing = by_importance(method.needs - network.offers)
    if missing:
        raise ValueError(
            f"{method.name} runs on {OFFERS.get(missing[0], missing[0])}; {network.name} is "
            f"not one: {_network_fix(method, missing[0], network)}"
        )


def gossips_for(name: str) -> list[str]:
    """The gossips a method composes with at its defaults (its own alone, for an alias);
    one that needs a switch flipped is listed with it: ``"push_sum (atc=False)"``."""
    key = _key(name)
    if key in ALIASES:
        return [ALIASES[key].parts()[0].name]
    cls = REGISTRY[key]
    try:
        rule = cls()
    except TypeError:  # a rule without defaults: its class's declarations
        rule = cls
    variants = [(rule, "")]  # the rule at its defaults, then with each switch flipped
    for f in dataclasses.fields(cls) if rule is not cls else ():
        if f.init and isinstance(f.default, bool):
            flip = {f.name: not getattr(rule, f.name)}
            variants.append((dataclasses.replace(rule, **flip), f" ({f.name}={flip[f.name]})"))
    out = []
    for gossip_name, gossip_cls in GOSSIPS.items():
        notes = [note for variant, note in variants if not gossip_cls().refuses(variant)]
        if notes:  # the first variant it takes
            out.append(gossip_name + notes[0])
    return out
