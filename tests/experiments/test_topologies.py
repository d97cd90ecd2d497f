"""The topology study and the network cost columns of every run."""

from __future__ import annotations

import dataclasses

import pytest

from decentopt.cli import main
from decentopt.driver import RunOptions
from decentopt.experiments import load_spec, run_spec
from decentopt.experiments.claims import check_panels, parse_claims
from decentopt.experiments.studies import run_study
from decentopt.experiments.study import load_study
from decentopt.results import read_csv
from tests.experiments.test_spec import BASE, write


def quiet(_: str) -> None:
    pass


STUDY = load_study("topologies")
GRAPHS = STUDY.graphs
CLAIMS = parse_claims(STUDY.claims, STUDY.source)
#: The graph labels the built-in study's claims compare.
SPARSER = ("complete", "exponential", "torus", "ring")
TIME_VARYING = ("one_peer_exponential", "one_peer_hypercube", "base_2", "base_3")


def test_rows_carry_the_communication_and_the_network_models_time(tmp_path):
    text = BASE + "\n[network]\nbandwidth = 1e6\nlatency = 1e-3\ncompute = 2e-3\n"
    spec = load_spec(write(tmp_path, text))
    rows = run_spec(spec, tmp_path / "out", progress=False, log=quiet).rows
    payload = 3 * 8  # d = 3 float64 entries per column
    for row in rows:
        t = row["step"]  # ED and EDM: one round per step over the ring, 2 peers each
        assert row["rounds"] == t and row["busiest_messages"] == 2 * t
        assert row["bytes_per_agent"] == pytest.approx(2 * t * payload)
        want = t * 2e-3 + 2 * t * 1e-3 + 2 * t * payload / 1e6
        assert row["model_time"] == pytest.approx(want)
    # the network model is presentation: a new one reprices stored rows without rerunning
    cheaper = load_spec(write(tmp_path, text.replace("latency = 1e-3", "latency = 0.0")))
    again = run_spec(cheaper, tmp_path / "out", progress=False, log=quiet)
    assert again.ran == [] and all(r["model_time"] < 1e-2 * max(r["step"], 1) for r in again.rows)


def test_rows_count_local_steps_as_iterations_and_only_rounds_as_communication(tmp_path):
    """A gradient evaluation is an iteration; ``local(4)`` adds a round, its bytes and their
    modelled time on every 4th step only, and ``periodic_global(4)``'s every 4th step is
    priced as a ring all-reduce: 2 (n - 1) messages of ceil(P / n) bytes."""
    text = BASE.replace("[algorithms.ed]\n[algorithms.edm]\n", "").replace("beta = 0.8\n", "")
    text += '[algorithms.local]\nmethod = "dsgd"\ngossip = "local(4)"\n'
    text += '[algorithms.pga]\nmethod = "dsgd"\ngossip = "periodic_global(4)"\n'
    text += "[network]\nbandwidth = 1e6\nlatency = 1e-3\ncompute = 2e-3\n"
    spec = load_spec(write(tmp_path, text.replace("iterations = 50", "iterations = 13")))
    rows = run_spec(spec, tmp_path / "out", progress=False, log=quiet).rows
    n, payload = 6, 3 * 8  # d = 3 float64 entries per column
    steps = {r["step"] for r in rows}
    assert steps == set(range(14))  # every step recorded
    for row in rows:
        t = row["step"]
        if row["algorithm"] == "local":  # a ring round on steps 4, 8, 12
            rounds, messages, sent = t // 4, 2 * (t // 4), 2 * (t // 4) * payload
        else:  # ring rounds, but an all-reduce on steps 4, 8, 12
            rounds, alls = t, t // 4
            messages = 2 * (t - alls) + 2 * (n - 1) * alls
            sent = 2 * (t - alls) * payload + 2 * (n - 1) * alls * -(-payload // n)
        assert (row["rounds"], row["busiest_messages"]) == (rounds, messages), row
        assert row["bytes_per_agent"] == pytest.approx(sent)
        want = t * 2e-3 + messages * 1e-3 + sent / 1e6
        assert row["model_time"] == pytest.approx(want)


def test_a_time_varying_topology_in_a_specification(tmp_path):
    text = BASE.replace('name = "ring"', 'name = "base_graph"\nbase = 3')
    spec = load_spec(write(tmp_path, text))
    assert spec.build_topology().period == spec.build_topology().period >= 2
    out = tmp_path / "out"
    rows = run_spec(spec, out, progress=False, log=quiet).rows
    assert max(r["busiest_messages"] for r in rows) <= 2 * max(r["step"] for r in rows)
    assert (
        main(
            [
                "run",
                str(tmp_path / "cfg.toml"),
                "--out",
                str(tmp_path / "cli"),
                "--x",
                "time",
                "--no-progress",
                "--jobs",
                "1",
            ]
        )
        == 0
    )
    assert (tmp_path / "cli" / "tiny.png").is_file()
    bad = write(tmp_path, BASE.replace('name = "ring"', 'name = "base_graph"\nk = 3'), "bad.toml")
    assert main(["run", str(bad), "--out", str(tmp_path / "bad")]) == 2


@pytest.mark.slow
def test_the_study_runs_resumes_and_judges_its_claims(tmp_path, capsys):
    out = tmp_path / "study"

    def study(check: bool, say) -> list:
        small = dataclasses.replace(STUDY, agents=(16,))
        options = RunOptions(log=say)
        return run_study(small, out, options, quick=True, sets=["iterations=40"], check=check)

    files = study(True, quiet)
    rows = read_csv(out / "results.csv")
    assert {r["graph"] for r in rows} == set(GRAPHS)
    assert {r["problem"] for r in rows} == {"topologies_quadratic", "topologies_logistic"}
    text = (out / "summary.md").read_text()
    assert text.count("| one_peer_hypercube |") == 2 and "## Claims" in text
    assert f"of {len(CLAIMS)} claims hold in this run" in text
    assert any(f.name == "topologies_quadratic_dsgd_time.png" for f in files)
    # time-varying rounds are cheaper per iteration than the complete graph's
    last = {
        r["graph"]: r for r in rows if r["step"] == 40 and r["problem"] == "topologies_quadratic"
    }
    assert last["one_peer_hypercube"]["model_time"] < last["complete"]["model_time"]
    # a rerun resumes every unit
    said: list[str] = []
    study(False, said.append)
    assert not any("done" in s or " s" == s[-2:] for s in said if s.startswith("  "))
    assert sum("resuming: 8 finished unit(s) kept" in s for s in said) == 2 * len(GRAPHS)


def synthetic_case(steady: dict[tuple[str, str], float], se: float = 0.01) -> dict:
    """The panels of one study case with given steady errors per (graph, method), 5 runs each."""
    from decentopt.experiments.summary import Stat
    from decentopt.experiments.topologies import Case

    stats = {
        key: Stat(value, se * value, value, None, 0, 1.0, runs=5, tail_points=20)
        for key, value in steady.items()
    }
    case = Case("topologies_quadratic", 32, {}, stats, {})
    return {case.name: case.stats}


def test_equal_errors_on_every_graph_do_not_pass_as_bias_growing_with_sparsity():
    claim = next(c for c in CLAIMS if "sparser" in c.text)
    equal = synthetic_case({(g, "dsgd"): 0.1 for g in SPARSER})
    ((_, verdict),) = check_panels([claim], equal)
    assert verdict.holds is None and "equal within noise" in verdict.evidence
    growing = synthetic_case({(g, "dsgd"): 0.1 * 2**k for k, g in enumerate(SPARSER)})
    assert check_panels([claim], growing)[0][1].holds is True
    shrinking = synthetic_case({(g, "dsgd"): 0.1 / 2**k for k, g in enumerate(SPARSER)})
    assert check_panels([claim], shrinking)[0][1].holds is False


def test_tracking_within_noise_of_dsgd_is_inconclusive_not_a_failure():
    claim = next(c for c in CLAIMS if "Gradient tracking" in c.text)
    steady = {(g, m): 0.1 for g in TIME_VARYING for m in ("dsgd", "dsgt")}
    ((_, verdict),) = check_panels([claim], synthetic_case(steady, se=0.2))
    assert verdict.holds is None
    lower = steady | {(g, "dsgt"): 1e-3 for g in TIME_VARYING}
    assert check_panels([claim], synthetic_case(lower))[0][1].holds is True


def test_a_graph_study_claim_must_name_one_of_its_checks(tmp_path):
    from decentopt.experiments.sources import PRESET_DIR

    text = (PRESET_DIR / "topologies.toml").read_text().replace('"steady_below"', '"tracking"')
    study = load_study(write(tmp_path, text, "t.toml"))
    with pytest.raises(ValueError, match=r"\[\[claims\]\] #5: .*one of .*steady_below"):
        run_study(study, tmp_path / "o", RunOptions(log=quiet))
    assert not (tmp_path / "o").exists()
    extra = (PRESET_DIR / "topologies.toml").read_text() + "level = 0.1\n"
    study = load_study(write(tmp_path, extra, "t.toml"))
    with pytest.raises(
        ValueError, match=r"#5 \(steady_below\): got an unexpected keyword .*'level'"
    ):
        run_study(study, tmp_path / "o", RunOptions(log=quiet))


def test_a_claim_on_a_graph_the_study_lacks_is_inconclusive():
    claim = next(c for c in CLAIMS if "sparser" in c.text)
    partial = synthetic_case({(g, "dsgd"): 0.1 for g in SPARSER[:-1]})
    ((_, verdict),) = check_panels([claim], partial)
    assert verdict.holds is None and "needs DSGD at 'ring'" in verdict.evidence


def test_a_copy_naming_the_checks_of_earlier_releases_loads_the_same_claims(tmp_path):
    """The study's old check names stand for the shared checks it names now (one warning
    each): the same tests, the same verdicts on the same cases."""
    from decentopt.experiments.sources import PRESET_DIR
    from decentopt.experiments.topologies import _current

    old = ["one_peer_cheaper", "base_no_worse", "sparser_more_bias"]
    old += ["exact_diffusion_needs_fixed_w", "tracking_exact"]
    tables = [{"text": c.text, "check": name} for c, name in zip(CLAIMS, old, strict=True)]
    with pytest.warns(DeprecationWarning, match="'tracking_exact' is spelled"):
        claims = parse_claims(_current(tables, "t.toml"), "t.toml")
    assert [c.test for c in claims] == [c.test for c in CLAIMS]
    steady = {(g, m): 0.1 * 2**k for k, g in enumerate(SPARSER) for m in ("dsgd", "dsgt")}
    case = synthetic_case(steady)
    assert [v.holds for _, v in check_panels(claims, case)] == [
        v.holds for _, v in check_panels(CLAIMS, case)
    ]
    assert "one_peer_cheaper" not in (PRESET_DIR / "topologies.toml").read_text()
    import decentopt.experiments.topologies as topologies
    from decentopt.experiments import claims as shared

    with pytest.warns(DeprecationWarning, match="experiments.claims.CHECKS"):
        assert topologies.CHECKS is shared.CHECKS
