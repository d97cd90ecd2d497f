"""Experiments: one run specification, one result store, one runner, reports and claims.

:func:`load_spec` reads a TOML file or preset into a :class:`RunSpec` (``spec``);
:func:`run_spec` computes or resumes every unit through the store (``store``) and
the one loop (``runner``); :func:`write_report` turns the rows into tables and
figures (``reports``, ``summary``); ``claims`` judges the claims a specification
states. A study (several specifications reported together) is a file too:
:func:`load_study` reads it (``study``) and :func:`run_study` runs it (``studies``;
``topologies`` and ``scaling`` hold what the graph and Table 1 studies add).
"""

from decentopt.experiments.reports import write_report
from decentopt.experiments.runner import Outcome, run_spec
from decentopt.experiments.spec import PRESETS, STUDIES, ConfigError, RunSpec, load_spec
from decentopt.experiments.studies import run_study
from decentopt.experiments.study import Study, load_study

__all__ = [
    "PRESETS",
    "STUDIES",
    "ConfigError",
    "Outcome",
    "RunSpec",
    "Study",
    "load_spec",
    "load_study",
    "run_spec",
    "run_study",
    "write_report",
]
