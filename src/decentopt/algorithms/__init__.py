"""Decentralized algorithms, one module each, registered by name.

>>> import decentopt as dopt
>>> alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
"""

from decentopt.algorithms.base import (
    Algorithm,
    AlgorithmState,
    HyperParams,
    MomentumHyperParams,
    check_network,
    momentum_direction,
)
from decentopt.algorithms.choco_dsgd import ChocoDSGD, ChocoState
from decentopt.algorithms.choco_ed import ChocoED, ChocoEDState
from decentopt.algorithms.choco_edm import ChocoEDM, ChocoEDMState
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
from decentopt.algorithms.push_diging import PushDIGing, PushDIGingState
from decentopt.algorithms.qg_dsgdm import QGDSGDm, QGDSGDmState
from decentopt.algorithms.registry import (
    REGISTRY,
    hyperparameters,
    make,
    names,
    register,
    resolve,
)
from decentopt.algorithms.relaysgd import RelaySGD, RelayState
from decentopt.algorithms.sgp import SGP, SGPState

__all__ = [
    "DSGD",
    "DSGT",
    "DSGTHB",
    "EDM",
    "EXTRA",
    "NIDS",
    "REGISTRY",
    "SGP",
    "Algorithm",
    "AlgorithmState",
    "ChocoDSGD",
    "ChocoED",
    "ChocoEDM",
    "ChocoEDMState",
    "ChocoEDState",
    "ChocoState",
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
    "PushDIGing",
    "PushDIGingState",
    "QGDSGDm",
    "QGDSGDmState",
    "RelaySGD",
    "RelayState",
    "SGPState",
    "check_network",
    "hyperparameters",
    "make",
    "momentum_direction",
    "names",
    "register",
    "resolve",
]
