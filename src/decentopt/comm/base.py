"""The communicator interface, :mod:`decentopt.communicator` (below the algorithms, which
type against it), under the name it has in the communicator package."""

from decentopt.communicator import *  # noqa: F403
from decentopt.communicator import __all__  # noqa: F401
