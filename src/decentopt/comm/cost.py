"""A network cost model: what the gossip rounds of a run would cost in time.

Every agent sends one message of the round's payload (the mixed tensors of one
agent, packed) to each of its peers of that round. Sending a message costs a
``latency`` plus ``bytes / bandwidth``; an agent's messages go out one after
the other, and the busiest agent sets the round's time (everyone waits for
it). A step also computes for ``compute`` seconds. So, over a run,

.. math::

    T = \\text{steps} \\cdot t_{\\text{compute}}
        + \\sum_{\\text{rounds } r} \\max_i \\, m_i(r) \\Big(\\text{latency}
        + \\frac{\\text{payload}}{\\text{bandwidth}}\\Big)

with ``m_i(r)`` the peers of agent ``i`` in round ``r``. The default is a
cluster of machines (1 GB/s, 50 µs per message); :data:`ONE_MACHINE` models
processes on one machine (10 GB/s, 5 µs). ``compute`` defaults to 0: set it to
the measured time of one local step of the model in question.
"""

from __future__ import annotations

from dataclasses import dataclass

from decentopt._schema import bounded, check_fields

__all__ = ["CLUSTER", "ONE_MACHINE", "NetworkModel"]


@dataclass(frozen=True)
class NetworkModel:
    """Bandwidth (bytes/s), latency (s per message) and compute time (s per step)."""

    bandwidth: float = bounded(1e9, above=0)
    latency: float = bounded(5e-5, minimum=0)
    compute: float = bounded(0.0, minimum=0)

    def __post_init__(self) -> None:
        check_fields(self, "NetworkModel")

    def seconds(self, steps: float, busiest_messages: float, busiest_bytes: float) -> float:
        """Modelled time of ``steps`` steps whose rounds had these busiest-agent totals."""
        return (
            steps * self.compute + busiest_messages * self.latency + busiest_bytes / self.bandwidth
        )


#: Processes on one machine.
ONE_MACHINE = NetworkModel(bandwidth=1e10, latency=5e-6)
#: Machines on a network (the default).
CLUSTER = NetworkModel()
