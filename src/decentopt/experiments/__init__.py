"""Experiments: one run specification, one result store, one runner, reports and claims.

``load_spec`` reads a TOML file or preset into a :class:`RunSpec`; ``run_spec``
computes (or resumes) every unit through the store and the one loop;
``write_report`` turns the rows into tables and figures; ``check_claims``
judges the paper's claims on a finished sweep.
"""

from decentopt.experiments.claims import CHECKS, check_claims, claims_markdown
from decentopt.experiments.reports import markdown_table, summary_markdown, write_report
from decentopt.experiments.runner import Outcome, run_spec
from decentopt.experiments.spec import PRESETS, ConfigError, RunSpec, load_spec, validate
from decentopt.experiments.store import ResultStore, Unit
from decentopt.experiments.summary import summarise

__all__ = [
    "CHECKS",
    "PRESETS",
    "ConfigError",
    "Outcome",
    "ResultStore",
    "RunSpec",
    "Unit",
    "check_claims",
    "claims_markdown",
    "load_spec",
    "markdown_table",
    "run_spec",
    "summarise",
    "summary_markdown",
    "validate",
    "write_report",
]
