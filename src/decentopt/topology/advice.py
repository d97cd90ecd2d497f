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


@functools.lru_cache(maxsize=16)  # a graph is frozen: judged once for every run on it
@one_thread()
def _rounds_below_lazy(network: Any) -> bool:
    """Whether some ``lambda_min(W_t)`` is below ``LAZY_EIGENVALUE``: exact on small graphs,
    else Gershgorin's ``min_i 2 w_ii - 1`` (a random schedule: its first 16 rounds)."""
    for r in (network.at(t) for t in range(network.period or 16)):
        small = r.n <= SPECTRUM_UP_TO
        low = np.linalg.eigvalsh(r.matrix())[0] if small else 2 * r.self_weight.min() - 1
        if low < LAZY_EIGENVALUE - _TOL:
            return True
    return False


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
