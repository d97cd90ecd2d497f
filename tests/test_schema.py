"""The field declarations that decentopt._schema checks where a dataclass is built."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from decentopt._schema import ConfigError, bounded, check_fields, parse


@dataclass(frozen=True)
class Clock:
    step: float = bounded(1.0, above=0, limits=(0.0, 10.0), unit=" s", note="per step")
    agents: tuple[int, ...] = bounded((), minimum=0, message="names agents by index >= 0")
    seed: int = bounded(0, minimum=0)

    def __post_init__(self) -> None:
        check_fields(self, "Clock")


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ({"step": 11.0}, ValueError, "Clock: step must be >= 0 and <= 10 s (per step); got 11.0"),
        ({"step": float("inf")}, ValueError, "Clock: step must be >= 0 and <= 10 s (per step)"),
        ({"step": float("nan")}, ValueError, "Clock: step must be a number; got nan"),
        ({"step": 0}, ValueError, "Clock: step must be > 0 s (per step); got 0.0"),
        ({"agents": (1, -2)}, ValueError, "Clock: agents names agents by index >= 0; got -2"),
        ({"agents": (1.5,)}, TypeError, "Clock: agents must be a whole number; got float 1.5"),
        ({"seed": 2**63}, ValueError, "Clock: seed must be <= 2**63 - 1 (64 bits)"),
    ],
)
def test_limits_units_messages_and_entries_are_checked_where_it_is_built(given, error, message):
    with pytest.raises(error, match=re.escape(message)):
        Clock(**given)


def test_values_are_normalised_and_a_table_checks_the_bounds_alone():
    clock = Clock(step=2, agents=[3, 1.0], seed=2**63 - 1)
    assert clock == Clock(step=2.0, agents=(3, 1), seed=2**63 - 1)
    assert type(clock.step) is float and [type(a) for a in clock.agents] == [int, int]
    with pytest.raises(ConfigError, match=r"\[t\]: 'step' must be > 0, found -1.0"):
        parse(Clock, {"step": -1.0}, "[t]")
    with pytest.raises(ConfigError, match=r"\[t\]: Clock: step must be >= 0 and <= 10 s"):
        parse(Clock, {"step": 20.0}, "[t]")
