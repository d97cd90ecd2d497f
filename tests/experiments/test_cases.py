"""The cases study (``decentopt reproduce local``): its files load and plan, and its claims
judge synthetic result tables as they should, on both sides."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from decentopt.cli import main
from decentopt.experiments import ConfigError
from decentopt.experiments.cases import Case, cost_table
from decentopt.experiments.claims import check_claims, parse_claims
from decentopt.experiments.runner import plan_units
from decentopt.experiments.sources import PRESET_DIR, tomllib
from decentopt.experiments.spec import load_spec
from decentopt.experiments.study import load_study
from decentopt.experiments.summary import summarise
from decentopt.experiments.variants import grids
from tests.experiments.test_verdicts import STEPS, THRESHOLD, curve, spec

LEVEL = 1.0  # one heterogeneity level (c = 1)


def rows_of(runs: dict[str, list[np.ndarray]], per_step: dict[str, float]) -> list[dict]:
    """Tidy rows of one level: ``runs[method][run]`` is a run's curve; ``per_step`` the bytes
    a method sends per iteration (rounds: one per 80 bytes; modelled time: 1 ms a round)."""
    rows = []
    for method, curves in runs.items():
        for run, values in enumerate(curves):
            for step, value in zip(STEPS, values, strict=True):
                sent = float(per_step[method] * step)
                rows.append(
                    {"c": LEVEL, "zeta2": 1.0, "run": run, "step": int(step), "algorithm": method,
                     "dist_to_opt": float(value), "bytes_per_agent": sent, "rounds": sent / 80,
                     "model_time": sent / 80 * 1e-3}
                )  # fmt: skip
    return rows


def paired_sweep(slowdown: dict[str, float], runs: int = 8, seed: int = 0) -> dict:
    """Every method settles at a run's own pace (shared by all methods in that run, the
    spread between runs is wide) times its ``slowdown``."""
    pace = 0.01 * np.random.default_rng(seed).lognormal(0, 0.3, runs)
    return {m: [curve(1e-3, rate / s) for rate in pace] for m, s in slowdown.items()}


CUT = parse_claims(
    [{"text": "x4", "check": "bytes_cut_by", "algorithm": "a", "others": ["b"], "factor": 4}],
    "test",
)


@pytest.mark.parametrize(
    ("slowdown", "expected"),
    [(1.1, True), (2.0, False), (0.6, False)],  # ratios 4/1.1 = 3.6, 2 and 6.7
)
def test_bytes_cut_by_judges_the_run_by_run_ratio(slowdown, expected):
    """a sends a quarter of b's bytes per iteration and needs ``slowdown`` times b's
    iterations: b's bytes over a's is 4 / slowdown in every run, whatever the run's pace."""
    rows = rows_of(paired_sweep({"a": slowdown, "b": 1.0}), {"a": 20.0, "b": 80.0})
    [(_, verdict)] = check_claims(CUT, summarise(rows, spec()))
    assert verdict.holds is expected, verdict.evidence
    assert f"x{4 / slowdown:.2f}"[:4] in verdict.evidence  # up to the recorded steps


def test_bytes_cut_by_is_inconclusive_at_the_edge_and_when_neither_settles():
    """A ratio at the edge (3.0 against x3 to x5), noisy by run: neither side is shown."""
    rng = np.random.default_rng(3)
    sweep = paired_sweep({"a": 4 / 3, "b": 1.0}, runs=6)
    sweep["a"] = [curve(1e-3, 0.01 * rng.lognormal(0, 0.3) * 3 / 4) for _ in range(6)]
    [(_, verdict)] = check_claims(CUT, summarise(rows_of(sweep, {"a": 20, "b": 80}), spec()))
    assert verdict.holds is None, verdict.evidence
    never = {m: [curve(0.5, 0.004)] * 6 for m in ("a", "b")}  # both stay above 0.02
    [(_, verdict)] = check_claims(CUT, summarise(rows_of(never, {"a": 20, "b": 80}), spec()))
    assert verdict.holds is None and "neither settles" in verdict.evidence


def cases_of(ratios: dict[int, float], runs: int = 8) -> list[Case]:
    """One part at several sizes n: ``a`` settles ``ratios[n]`` times sooner than ``b``."""
    s = spec()
    out = []
    for k, (n, ratio) in enumerate(ratios.items()):
        rows = rows_of(paired_sweep({"a": 1.0, "b": ratio}, runs, seed=k), {"a": 80, "b": 80})
        out.append(Case(s, n, rows, summarise(rows, s)))
    return out


GAP = parse_claims(
    [{"text": "gap", "check": "gap_grows", "algorithm": "a", "other": "b"}], "test", reads="cases"
)


@pytest.mark.parametrize(
    ("ratios", "expected"),
    [({32: 1.2, 64: 1.5}, True), ({32: 1.5, 64: 1.2}, False), ({32: 1.3, 64: 1.3}, None)],
)
def test_gap_grows_compares_the_ratios_across_sizes(ratios, expected):
    [(_, verdict)] = check_claims(GAP, cases_of(ratios))
    assert verdict.holds is expected, verdict.evidence
    assert "n = 32 -> 64" in verdict.evidence


def test_gap_grows_needs_two_sizes_and_few_runs_cannot_decide():
    [(_, verdict)] = check_claims(GAP, cases_of({32: 1.2}))
    assert verdict.holds is None and "two sizes" in verdict.evidence
    [(_, verdict)] = check_claims(GAP, cases_of({32: 1.2, 64: 1.5}, runs=3))
    assert verdict.holds is None and "too few runs" in verdict.evidence


def test_the_cost_table_reads_each_column_at_each_runs_settling_iteration():
    """a sends a quarter of b's bytes and settles in the same iterations: a quarter of the
    rounds, bytes and modelled seconds, the same iterations."""
    rows = rows_of(paired_sweep({"a": 1.0, "b": 1.0}, runs=4), {"a": 20.0, "b": 80.0})
    s = spec()
    stats = summarise(rows, s)
    settle = np.mean(stats[(LEVEL, "a")].settle)
    variant = next(iter(s.algorithms.values()))
    s = dataclasses.replace(s, algorithms={"a": variant, "b": variant})
    body = cost_table(s, rows, stats).splitlines()[2:]
    a_cells, b_cells = ([c.strip() for c in line.split("|")[3:7]] for line in body)
    assert a_cells[0] == b_cells[0] == f"{settle:.3g}"
    for a, b in zip(a_cells[1:], b_cells[1:], strict=True):
        assert float(a) == pytest.approx(float(b) / 4, rel=2e-3)
    assert float(b_cells[2]) == pytest.approx(80 * settle, rel=2e-3)


def test_the_local_study_loads_its_parts_and_plans_them():
    study = load_study("local", quick=True)
    assert study.study == "cases" and study.sizes == {"local_pga": (32, 64)}
    assert study.specs == ("local_pga", "local_bytes", "local_exact", "local_digits")
    [gap] = parse_claims(study.claims, study.source, reads="cases")
    assert "DSGD's iterations to settle over dsgd_pga8's" in gap.test
    for part in study.specs:
        spec_ = load_spec(study.spec_path(part), quick=True)
        assert spec_.claims and spec_.network is not None
        # every variant planned (a training run: one unit per variant and run)
        assert {p.variant.label for p in plan_units(spec_)} == set(spec_.algorithms)
        raw = tomllib.loads((PRESET_DIR / f"{part}.toml").read_text())
        for table in raw["claims"]:  # every label a claim names is a variant or grid of its part
            named = {table["algorithm"], *table["others"]}
            assert named <= set(spec_.algorithms) | set(grids(list(spec_.algorithms)))
    gossips = {
        label: load_spec(p, quick=True).algorithms[label].make().gossip
        for p, label in (("local_pga", "dsgd_pga8"), ("local_bytes", "dsgd_local4"))
    }
    assert gossips["dsgd_pga8"].every == 8 and gossips["dsgd_local4"].every == 4
    assert load_spec("local_pga", quick=True).threshold == THRESHOLD


def test_the_digits_part_compares_tuned_grids_at_equal_bytes():
    """Both sides are grids of step sizes, and both talk on every 4th step only: one ring
    gossip round against one all-reduce."""
    spec_ = load_spec("local_digits")
    assert (spec_.panel, spec_.runs, spec_.params.epochs) == (None, 4, 30)
    members = grids(list(spec_.algorithms))
    assert {k: len(v) for k, v in members.items()} == {"dsgd_local4": 4, "diloco4": 4}
    local = spec_.algorithms["dsgd_local4(lr=0.2)"].make()
    outer = spec_.algorithms["diloco4(lr=0.1)"].make()
    assert local.gossip.every == 4 and outer.outer.every == 4
    assert [local.talks(t) for t in range(4)] == ["none"] * 3 + ["gossip"]
    assert [outer.talks(t) for t in range(4)] == ["none"] * 3 + ["all"]
    quick = load_spec("local_digits", quick=True)
    assert (quick.runs, quick.params.epochs) == (3, 12)
    [judged] = quick.claims
    assert "non-inferiority" in judged.test and "x1.1 their bytes" in judged.test


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("nosuch = [32, 64]", r"\[sizes\] nosuch: not a part"),
        ("local_pga = []", r"\[sizes\] local_pga: give numbers of agents, e.g. \[32, 64\]"),
        ("local_pga = [32, 0]", r"\[sizes\] local_pga: give numbers of agents"),
        (
            'local_pga = ["32"]',
            r"'sizes.local_pga' must be a list of whole numbers, found \['32'\]",
        ),
        ("local_pga = 32", r"'sizes.local_pga' must be a list of whole numbers, found 32"),
    ],
)
def test_a_size_for_no_part_or_not_numbers_of_agents_is_refused_in_one_line(
    tmp_path, given, message
):
    text = (PRESET_DIR / "local.toml").read_text().replace("local_pga = [32, 64]", given)
    (tmp_path / "s.toml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_study(tmp_path / "s.toml")


def test_sizes_read_as_whole_numbers(tmp_path):
    text = (PRESET_DIR / "local.toml").read_text().replace("[32, 64]", "[32.0, 64]")
    (tmp_path / "s.toml").write_text(text)
    assert load_study(tmp_path / "s.toml").sizes == {"local_pga": (32, 64)}


@pytest.mark.slow
def test_reproduce_local_quick_holds_every_claim(tmp_path, capsys):
    args = ["reproduce", "local", "--quick", "--check", "--x", "bytes", "--out", str(tmp_path)]
    assert main([*args, "--no-progress", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "7 of 7 claims hold in this run" in out
    summary = (tmp_path / "summary.md").read_text()
    for case in ("local_pga, n = 32", "local_pga, n = 64", "local_bytes, n = 32"):
        assert f"## {case}" in summary
    assert "## local_digits, n = 16" in summary and "best of its grid" in summary
    assert (tmp_path / "local_pga" / "n64" / "local_pga.png").exists()
    assert (tmp_path / "local_exact" / "local_exact.png").exists()


def test_one_registry_whose_checks_declare_what_they_read():
    """Every check is in claims.CHECKS; a run or study is offered those that read what it
    measures (a check of another kind is refused in one line), and the old registries'
    names are that one, with a warning."""
    from decentopt.experiments import cases, claims, trained

    reads = {name: check.reads for name, check in claims.CHECKS.items()}
    assert reads["gap_grows"] == "cases" and reads["matches_at_bytes"] == "finals"
    assert reads["steady_below"] == reads["all_of"] == "panel"
    for old in (cases, trained):
        with pytest.warns(DeprecationWarning, match="experiments.claims.CHECKS"):
            assert old.CHECKS is claims.CHECKS
    table = {"text": "t", "check": "gap_grows", "algorithm": "a", "other": "b"}
    with pytest.raises(ConfigError, match="check = one of converges_linearly, trapped") as err:
        parse_claims([table], "t.toml", reads="panel")
    assert "gap_grows" not in str(err.value) and "\n" not in str(err.value)
    wrong = {"text": "t", "check": "steady_below", "algorithm": "a", "others": ["b"]}
    with pytest.raises(ConfigError, match=r"check = one of gap_grows$"):
        parse_claims([wrong], "t.toml", reads="cases")

    # a check added later (a plugin's) is offered where it reads, judged on the cases
    def more_than_one_case():
        def check(judged):
            return claims.Verdict(len(judged) > 1, f"{len(judged)} cases")

        return check, "more than one case"

    claims.CHECKS.add("more_than_one_case", claims.ClaimCheck("cases", more_than_one_case))
    try:
        [(_, verdict)] = check_claims(
            parse_claims([{"text": "t", "check": "more_than_one_case"}], "t", reads="cases"),
            cases_of({32: 1.2, 64: 1.5}),
        )
        assert verdict.holds is True
    finally:
        del claims.CHECKS["more_than_one_case"]
