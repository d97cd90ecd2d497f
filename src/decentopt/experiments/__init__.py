"""Experiments: configuration files, presets for the paper's figures, sweeps, checks."""

from decentopt.experiments.claims import CLAIMS, check_claims, claims_markdown
from decentopt.experiments.config import (
    PRESETS,
    ConfigError,
    ExperimentConfig,
    load_config,
    validate,
)
from decentopt.experiments.summary import summarise, summary_markdown
from decentopt.experiments.sweep import build_problem, build_topology, run_sweep

__all__ = [
    "CLAIMS",
    "PRESETS",
    "ConfigError",
    "ExperimentConfig",
    "build_problem",
    "build_topology",
    "check_claims",
    "claims_markdown",
    "load_config",
    "run_sweep",
    "summarise",
    "summary_markdown",
    "validate",
]
