"""One method type: a rule and a gossip, a nested state seen through one view, aliases as
data, and the earlier names that still work with one warning each."""

from __future__ import annotations

import ast
import pickle
import warnings
from pathlib import Path

import pytest
import torch

import decentopt as dopt
from decentopt.algorithms import ALIASES, Method, MethodState, make
from decentopt.algorithms.gossips import Delayed, Exact, parse

CASES = [
    ("edm", None),
    ("dsgd", "choco(top_k(0.5), gamma=0.5)"),
    ("dmsgd", "delayed(2)"),
    ("sgp", None),
    ("dsgt", "multi_round(2)"),
]


@pytest.mark.parametrize(("name", "gossip"), CASES)
def test_every_method_is_a_rule_and_a_gossip_with_a_nested_state(name, gossip):
    alg = make(name, lr=0.1, **({} if gossip is None else {"gossip": gossip}))
    text = gossip or (ALIASES[name].gossip if name in ALIASES else "exact")
    assert type(alg) is Method and alg.gossip == parse(text)
    x0 = torch.randn(4, 3, dtype=torch.float64)
    state = alg.init(x0)
    assert type(state) is MethodState and state.rule.x is state.x and state.t == 0
    names = list(state.tensors())
    assert names[0] == "x" and names[: len(state.rule) - 1] == list(state.rule._fields[:-1])
    assert names[len(state.rule) - 1 :] == list(state.gossip)
    # replace by the flat names, t too; a round trip through the checkpoint format
    doubled = state.replace(**{k: 2 * v for k, v in state.tensors().items()}, t=5)
    assert doubled.t == 5 and all(
        torch.equal(doubled.tensors()[k], 2 * v) for k, v in state.tensors().items()
    )
    back = alg.init(x0).replace(**doubled.as_dict())
    back = pickle.loads(pickle.dumps(back))  # states pickle (sweep workers return them)
    assert back.t == 5 and type(back.rule) is type(state.rule)
    assert all(torch.equal(back.tensors()[k], v) for k, v in doubled.tensors().items())


def test_a_method_declares_its_parts_explicitly():
    exact = make("edm", lr=0.1)
    assert exact.name == "edm" and exact.gossip == Exact() and exact.needs == {"symmetric"}
    assert exact.fused is not None and exact.fused.kind == "edm" and exact.pace == (0, False)
    late = make("dmsgd", lr=0.1, gossip="delayed(1, staleness=3)")
    assert late.name == "dmsgd+delayed" and late.pace == (3, False) and late.fused is None
    assert make("ad_psgd", lr=0.1).pace == (0, True)
    assert make("sgp", lr=0.1).agent_fields == ("w",)
    assert make("dsgt", lr=0.1, gossip="multi_round(3)").rounds_per_step == 6
    # a rule given as it is runs as a method with exact mixing
    rule = dopt.algorithms.EDM(lr=0.1)
    assert dopt.algorithms.as_method(rule) == Method(rule) == make("edm", lr=0.1)


def test_no_delegation_and_no_generated_state_classes_in_the_algorithms():
    root = Path(dopt.algorithms.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        methods = [
            f.name
            for c in ast.walk(ast.parse(text))
            if isinstance(c, ast.ClassDef)
            for f in c.body
            if isinstance(f, ast.FunctionDef)
        ]
        assert "__getattr__" not in methods, path  # a module's, for earlier names, is allowed
        assert "globals()" not in text and "namedtuple(" not in text, path


def test_aliases_are_a_rule_a_gossip_in_text_and_fixed_hyper_parameters():
    osgp = ALIASES["osgp"]
    assert (osgp.rule, osgp.gossip, osgp.fixed) == ("dmsgd", "delayed(inner=push_sum)", {})
    alg = make("osgp", lr=0.1, tau=2)
    assert alg.gossip == Delayed(2, "push_sum") and alg.rule == make("dmsgd", lr=0.1).rule
    assert dopt.algorithms.hyperparameters("osgp")[-3:] == ("tau", "staleness", "outer")
    assert make("push_diging", lr=0.1).rule.atc is False  # a fixed hyper-parameter
    with pytest.raises(TypeError, match=r"osgp: .*hyper-parameter 'inner'"):
        make("osgp", inner="exact")


def test_the_earlier_names_work_and_warn_once_with_their_replacement():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            composed = dopt.algorithms.Composed
            overlap = dopt.algorithms.OverlapPushSum
            rounds = dopt.comm.MultiRound
    said = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert len(said) == 3, said  # once each
    assert composed is Method and overlap(2) == Delayed(2, "push_sum")
    assert "multi_round(K)" in said[2] and "Method" in said[0] and "delayed" in said[1]
    comm = rounds(dopt.comm.SimulatedCommunicator(dopt.topology.ring(5)), 2, "none")
    z = torch.randn(5, 2, dtype=torch.float64)
    W = dopt.topology.ring(5).W
    torch.testing.assert_close(comm.mix(z), W @ (W @ z))
