"""Reports: the verdicts of a changed run say that they are, in the printed report and in
summary.md; an unchanged run's do not."""

from __future__ import annotations

from functools import partial

from decentopt.experiments import load_spec, run_spec
from decentopt.experiments.claims import claims_report
from decentopt.experiments.reports import CHANGED_RUN, write_report


def test_the_verdicts_of_a_quick_run_say_the_full_run_may_differ(tmp_path):
    sets = ["iterations=80", "runs=2", "agents=8", "problem_params.c=[1.0]"]
    spec = load_spec("fig1", quick=True, overrides=sets)
    rows = run_spec(spec, tmp_path / "o", progress=False, log=lambda _: None).rows
    claims = partial(claims_report, spec.claims)
    for modified in (True, False):
        said: list[str] = []
        folder = tmp_path / str(modified)
        write_report(spec, rows, folder, modified=modified, claims=claims, say=said.append)
        verdicts = said[-1]
        summary = (folder / "summary.md").read_text()
        assert "claims hold in this run" in verdicts
        assert (CHANGED_RUN in verdicts) is modified and (CHANGED_RUN in summary) is modified
        if modified:  # right after the tally of the verdicts
            assert verdicts.index(CHANGED_RUN) > verdicts.index("claims hold in this run")
