"""The communicator interface, :mod:`decentopt.communicator` (below the algorithms, which
type against it), under the name it has in the communicator package."""

from decentopt.communicator import (
    CommStats,
    Communicator,
    Elementwise,
    Relaying,
    Shared,
    map_then_mix,
    rows_of,
    slot_table,
)

__all__ = [
    "CommStats",
    "Communicator",
    "Elementwise",
    "Relaying",
    "Shared",
    "map_then_mix",
    "rows_of",
    "slot_table",
]
