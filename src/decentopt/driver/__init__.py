"""The one loop (:func:`run_loop`) and the one result type (:class:`Result`) of every run.

:mod:`.loop` composes the parts: :mod:`.recorder`, :mod:`.guard` (divergence) and
:mod:`.checkpointer`; :mod:`.result` holds what a run returns, :mod:`.timeline` when its
steps would happen in simulated seconds, :mod:`.options` how a run is carried out
(:class:`RunOptions`, built once where a run starts and passed down whole).
"""

from decentopt.driver.block import THREADS_CROSSOVER, check_gradient
from decentopt.driver.checkpointer import CHECK_EVERY, Checkpointer
from decentopt.driver.guard import DivergenceGuard
from decentopt.driver.loop import LARGE_STATE_BYTES, intra_op_threads, run_loop
from decentopt.driver.options import RunOptions
from decentopt.driver.recorder import Recorder
from decentopt.driver.result import Record, Result
from decentopt.driver.timeline import TimeModel, timed

__all__ = [
    "CHECK_EVERY",
    "LARGE_STATE_BYTES",
    "THREADS_CROSSOVER",
    "Checkpointer",
    "DivergenceGuard",
    "Record",
    "Recorder",
    "Result",
    "RunOptions",
    "TimeModel",
    "check_gradient",
    "intra_op_threads",
    "run_loop",
    "timed",
]
