"""What a sweep says while it runs: one whole line per event, never interleaved.

Lines of parallel workers are each written in one call, so that they never run
together; the parent says at once which units it reuses, then one line per unit
finished, and one line for a unit whose worker died.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

__all__ = ["Progress", "say_line"]

#: Units named in the line that says what a rerun keeps (the rest are counted).
SHOWN = 8


def say_line(text: str) -> None:
    """Print one whole line in a single write: lines of parallel workers never run together."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Progress:
    """The lines of one sweep: what it reuses, each unit done, each worker lost."""

    def __init__(self, say: Callable[[str], None], total: int) -> None:
        self.say = say
        self.total = total
        self.done = 0

    def reused(self, names: Sequence[str]) -> None:
        """Said before anything is computed: the finished units a rerun keeps."""
        if names:
            left = self.total - len(names)
            shown = ", ".join(names[:SHOWN])
            more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
            self.say(
                f"resuming: {len(names)} finished unit(s) kept ({shown}{more}); {left} to compute"
            )

    def finished(self, name: str, pending: int) -> None:
        self.done += 1
        self.say(f"  {name:14s} done ({self.done}/{pending})")

    def lost(self, name: str, why: str, again: bool) -> None:
        then = "computing it again" if again else "it is left for a rerun"
        first = why.strip().splitlines()[0] if why.strip() else "its worker was lost"
        self.say(f"  {name:14s} {first}; finished units are kept; {then}")
