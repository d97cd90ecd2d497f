"""Input checks shared by every layer: numbers as users pass them, and names with suggestions.

Users pass rates as ``0.05``, ``np.float32(0.05)`` or ``torch.tensor(0.05)`` and
counts as ``10``, ``np.int64(10)`` or (from TOML) ``10.0``; all are accepted and
normalised to Python ``float``/``int``. A misspelled name gets a "did you mean".
"""

from __future__ import annotations

import difflib
import math
import numbers
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

__all__ = [
    "PROBLEM_DTYPES",
    "as_count",
    "as_real",
    "check_problem_dtype",
    "give_up_compiling",
    "same_agents",
    "unknown_name",
]


def _scalar(value: Any) -> Any:
    """Unwrap 0-d tensors and arrays to the Python number (or bool) they hold."""
    if isinstance(value, torch.Tensor | np.ndarray) and value.ndim == 0:
        return value.item()
    return value


def as_real(value: Any, what: str, *, finite: bool = True) -> float:
    """A real number (Python, numpy or 0-d tensor; not bool) as a Python float."""
    value = _scalar(value)
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a real number; got {type(value).__name__} {value!r}")
    out = float(value)
    if finite and not math.isfinite(out):
        raise ValueError(f"{what} must be finite; got {out}")
    return out


def as_count(value: Any, what: str, *, minimum: int = 0) -> int:
    """A whole number (int, numpy integer, 0-d tensor or an integral float) as a Python int."""
    value = _scalar(value)
    if isinstance(value, bool | np.bool_) or not (
        isinstance(value, numbers.Integral)
        or (isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer())
    ):
        raise TypeError(f"{what} must be a whole number; got {type(value).__name__} {value!r}")
    out = int(value)
    if out < minimum:
        raise ValueError(f"{what} must be >= {minimum}; got {out}")
    return out


def unknown_name(kind: str, name: object, choices: Iterable[str]) -> str:
    """``unknown KIND 'x'; did you mean 'y'? Choose one of: a, b, c``."""
    options = [str(c) for c in choices]
    close = difflib.get_close_matches(str(name), options, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    sep = " " if hint else "; "
    return f"unknown {kind} {name!r}{hint}{sep}choose one of: {', '.join(options)}"


#: Floating types the simulated problems compute in.
PROBLEM_DTYPES = (torch.float32, torch.float64)


def check_problem_dtype(dtype: Any, owner: str) -> torch.dtype:
    """Refuse dtypes the problems cannot compute in (half precision lacks the solvers)."""
    if dtype not in PROBLEM_DTYPES:
        raise TypeError(
            f"{owner}: dtype {dtype} is not supported; use torch.float32 or torch.float64 "
            "(half precision lacks the linear-algebra routines these problems need)"
        )
    return dtype


def same_agents(topology: Any, problem: Any) -> None:
    """Refuse, in one line naming the fix, a topology and a problem of different sizes."""
    if topology.n != problem.n:
        raise ValueError(
            f"the topology has n = {topology.n} agents but the problem has n = {problem.n}; "
            "build both with the same number of agents"
        )


def give_up_compiling(what: str, instead: str, exc: Exception) -> None:
    """Warn that ``torch.compile``'d ``what`` failed with ``exc`` (compilers fail in many
    ways; the run must go on), and that ``instead`` runs from then on."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    warnings.warn(
        f"torch.compile of {what} failed ({type(exc).__name__}: {first}); {instead}",
        RuntimeWarning,
        stacklevel=5,
    )
