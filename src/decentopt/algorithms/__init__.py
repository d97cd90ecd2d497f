"""Decentralized algorithms, one module each, registered by name.

>>> import decentopt as dopt
>>> alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
"""

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
from decentopt.algorithms.mt import MomentumTracking, MTState
from decentopt.algorithms.nids import NIDS, NIDSState
from decentopt.algorithms.qg_dsgdm import QGDSGDm, QGDSGDmState
from decentopt.algorithms.registry import (
    REGISTRY,
    hyperparameters,
    make,
    names,
    register,
    resolve,
)

__all__ = [
    "DSGD",
    "DSGT",
    "DSGTHB",
    "EDM",
    "EXTRA",
    "NIDS",
    "REGISTRY",
    "Algorithm",
    "AlgorithmState",
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
    "ExactDiffusion",
    "HyperParams",
    "MTState",
    "MomentumHyperParams",
    "MomentumTracking",
    "NIDSState",
    "QGDSGDm",
    "QGDSGDmState",
    "hyperparameters",
    "make",
    "momentum_direction",
    "names",
    "register",
    "resolve",
]
