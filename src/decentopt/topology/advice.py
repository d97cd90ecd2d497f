"""What a method that needs positive semi-definite mixing should hear about a graph, in words.

Exact diffusion (ED, EDM, NIDS and their compressed forms) corrects its bias
with ``X - Psi``, the difference of two consecutive combine steps; its analysis
holds for one fixed ``W`` whose eigenvalues are ``>= 0``. On a time-varying
graph the correction mixes two different ``W_t``, and with one-peer rounds
(``W_t = (I + P_t) / 2``, eigenvalues 0 and 1, positive semi-definite) ED and
EDM diverge within a few hundred steps at a step size DSGD runs with (measured:
``one_peer_exponential(16)``, ``random_matchings(16)``, ``base_graph(16)``).
The lazy rounds ``(W_t + I) / 2``, all of whose eigenvalues are ``>= 1/2``,
converge. :func:`mixing_warning` says so before a run starts.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from decentopt.perf import one_thread

__all__ = ["LAZY_EIGENVALUE", "mixing_warning"]

#: Smallest eigenvalue of every round of a lazy schedule ((W_t + I) / 2 of a PSD W_t).
LAZY_EIGENVALUE = 0.5
#: Largest graph whose rounds' spectra are computed; above it a Gershgorin bound decides.
SPECTRUM_UP_TO = 512
_TOL = 1e-9


@one_thread()
def _smallest_eigenvalue(round_: Any) -> float:
    """``lambda_min(W_t)``: exact on small graphs, else Gershgorin's ``min_i 2 w_ii - 1``."""
    if round_.n <= SPECTRUM_UP_TO:
        return float(np.linalg.eigvalsh(round_.matrix())[0])
    return float(2 * round_.self_weight.min() - 1)


@functools.lru_cache(maxsize=16)  # a graph is frozen: judged once for every run on it
def _rounds_below_lazy(network: Any) -> bool:
    count = network.period or 16  # a random schedule: its first rounds
    return any(_smallest_eigenvalue(network.at(t)) < LAZY_EIGENVALUE - _TOL for t in range(count))


def mixing_warning(network: Any, method: str, needs_psd: bool) -> str | None:
    """A one-line warning when ``method`` (``needs_psd``: an exact-diffusion method) is
    unlikely to converge on ``network``, naming ``.lazy()`` as the fix; ``None`` if not."""
    if not needs_psd or "symmetric" not in network.offers:  # push-sum graphs: no W to judge
        return None
    if not network.psd:
        return (
            f"warning: {method}'s analysis needs every W positive semi-definite, and "
            f"{network.name} has rounds that are not; it may not converge (its lazy() "
            "version is, at the price of slower mixing)"
        )
    if network.period != 1 and _rounds_below_lazy(network):
        return (
            f"warning: {method} corrects its bias with two consecutive W_t, and on the "
            f"time-varying {network.name} (rounds with eigenvalues below 1/2) it diverges "
            "within a few hundred steps; run it on the graph's lazy() version (every W_t "
            "replaced by (W_t + I) / 2)"
        )
    return None
