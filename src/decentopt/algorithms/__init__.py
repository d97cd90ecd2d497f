"""Decentralized methods: update rules (one module each) composed with gossips.

>>> import decentopt as dopt
>>> alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
>>> compressed = dopt.algorithms.make("edm", lr=0.05, gossip="choco(qsgd(4), gamma=0.3)")
"""

from decentopt._renamed import renamed
from decentopt._schema import bounded
from decentopt.algorithms import gossips
from decentopt.algorithms.ad_psgd import ADPSGD, ADPSGDState
from decentopt.algorithms.base import (
    Algorithm,
    AlgorithmState,
    HyperParams,
    MomentumHyperParams,
    momentum_direction,
)
from decentopt.algorithms.decentlam import DecentLaM, DecentLaMState
from decentopt.algorithms.dmsgd import DmSGD, DmSGDState
from decentopt.algorithms.dsgd import DSGD, DSGDState
from decentopt.algorithms.dsgt import DSGT, DSGTState
from decentopt.algorithms.dsgt_hb import DSGTHB, DSGTHBState
from decentopt.algorithms.ed import EDState, ExactDiffusion
from decentopt.algorithms.edm import EDM, EDMState
from decentopt.algorithms.extra import EXTRA, EXTRAState
from decentopt.algorithms.gossips import Choco, Exact, Gossip, MultiRound, PushSum
from decentopt.algorithms.k_gt import KGT, KGTState
from decentopt.algorithms.led import LED, LEDState
from decentopt.algorithms.method import Method, MethodState, as_method
from decentopt.algorithms.mt import MomentumTracking, MTState
from decentopt.algorithms.nids import NIDS, NIDSState
from decentopt.algorithms.outer import OUTERS, Nesterov, Outer, register_outer
from decentopt.algorithms.qg_dsgdm import QGDSGDm, QGDSGDmState
from decentopt.algorithms.registry import (
    ALIASES,
    REGISTRY,
    check_network,
    compose,
    gossips_for,
    hyperparameters,
    make,
    names,
    register,
    resolve,
)
from decentopt.algorithms.relaysgd import RelaySGD, RelayState

__all__ = [
    "ADPSGD",
    "ALIASES",
    "DSGD",
    "DSGT",
    "DSGTHB",
    "EDM",
    "EXTRA",
    "KGT",
    "LED",
    "NIDS",
    "OUTERS",
    "REGISTRY",
    "ADPSGDState",
    "Algorithm",
    "AlgorithmState",
    "Choco",
    "DSGDState",
    "DSGTHBState",
    "DSGTState",
    "DecentLaM",
    "DecentLaMState",
    "DmSGD",
    "DmSGDState",
    "EDMState",
    "EDState",
    "EXTRAState",
    "Exact",
    "ExactDiffusion",
    "Gossip",
    "HyperParams",
    "KGTState",
    "LEDState",
    "MTState",
    "Method",
    "MethodState",
    "MomentumHyperParams",
    "MomentumTracking",
    "MultiRound",
    "NIDSState",
    "Nesterov",
    "Outer",
    "PushSum",
    "QGDSGDm",
    "QGDSGDmState",
    "RelaySGD",
    "RelayState",
    "as_method",
    "bounded",
    "check_network",
    "compose",
    "gossips",
    "gossips_for",
    "hyperparameters",
    "make",
    "momentum_direction",
    "names",
    "register",
    "register_outer",
    "resolve",
]


def _overlap_push_sum(
    tau: int = 1, inner: str | gossips.Gossip = "push_sum", staleness: int | None = None
) -> gossips.Delayed:
    return gossips.Delayed(tau, inner, staleness)


__getattr__ = renamed(
    "decentopt.algorithms",
    {
        "Composed": (lambda: Method, "every method is a decentopt.algorithms.Method"),
        "OverlapPushSum": (
            lambda: _overlap_push_sum,
            "OSGP's gossip is delayed(tau, push_sum): gossips.Delayed(tau, 'push_sum')",
        ),
    },
)
