"""Experiments: one run specification, one result store, one runner, reports and claims.

:func:`load_spec` reads a TOML file or preset into a :class:`RunSpec` (``spec``);
:func:`run_spec` computes or resumes every unit through the store (``store``) and
the one loop (``runner``); :func:`write_report` turns the rows into tables and
figures (``reports``, ``summary``); ``claims`` judges the claims a specification
states. A study (several specifications reported together) is a file too:
``study.load_study`` reads it and ``studies.run_study`` runs it (``topologies`` and
``scaling`` hold what the graph and Table 1 studies add).
"""

from decentopt.experiments.reports import write_report
from decentopt.experiments.runner import Outcome, run_spec
from decentopt.experiments.spec import PRESETS, ConfigError, RunSpec, load_spec

__all__ = ["PRESETS", "ConfigError", "Outcome", "RunSpec", "load_spec", "run_spec", "write_report"]
