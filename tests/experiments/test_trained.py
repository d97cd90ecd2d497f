"""Claims on training runs (:mod:`decentopt.experiments.trained`): grids stand for their tuned
member, and ``matches_at_bytes`` is the one-sided paired t-test it states, on both sides."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from decentopt.experiments import ConfigError
from decentopt.experiments.claims import check_claims, parse_claims
from decentopt.experiments.reports import write_report
from decentopt.experiments.spec import load_spec
from decentopt.experiments.trained import final_table, finals, tuned

LAST = 180  # the last recorded step


def rows_of(finals_: dict[str, list[float]], sent: dict[str, float]) -> list[dict]:
    """Rows of a training run: ``finals_[label][run]`` is the final test accuracy (NaN:
    diverged), reached from 0.1 at step 90; ``sent[label]`` the bytes per agent in all."""
    rows = []
    for label, values in finals_.items():
        for run, value in enumerate(values):
            for step, acc in ((90, 0.1), (LAST, value)):
                row = {"phi": 0.1, "run": run, "algorithm": label, "step": step}
                row |= {"test_acc": acc, "test_loss": 1 - acc, "rounds": step / 4}
                rows.append(row | {"bytes_per_agent": sent[label] * step / LAST})
    return rows


def claim(algorithm: str = "a", others: tuple[str, ...] = ("b",), **args):
    table = {"text": "t", "check": "matches_at_bytes", "algorithm": algorithm, "others": others}
    return parse_claims([table | args], "test", reads="finals")


def verdict(rows: list[dict], **args):
    [(_, found)] = check_claims(claim(**args), rows)
    return found


def test_a_grid_stands_for_its_best_finished_member():
    rows = rows_of(
        {"a(lr=0.1)": [0.8, 0.82], "a(lr=0.2)": [0.9, 0.88], "a(lr=0.4)": [0.99, np.nan]},
        {"a(lr=0.1)": 1.0, "a(lr=0.2)": 1.0, "a(lr=0.4)": 1.0},
    )
    table = finals(rows, "test_acc")
    assert tuned("a", table, "test_acc") == "a(lr=0.2)"  # lr=0.4 diverged in run 1
    losses = finals(rows, "test_loss")
    assert tuned("a", losses, "test_loss") == "a(lr=0.2)"  # losses: the lowest (0.11)
    assert tuned("a(lr=0.1)", table, "test_acc") == "a(lr=0.1)"  # a variant is itself
    assert tuned("nosuch", table, "test_acc") is None
    text = final_table(rows, list(table), "test_acc")
    assert "| a(lr=0.2) | 0.8900 ± 0.01 | 1e-06 MB | 45 | best of its grid |" in text
    assert "diverged in 1/2 runs" in text


def test_runs_are_paired_so_a_wide_spread_between_runs_does_not_hide_a_small_gain():
    """The runs differ by up to 0.3 between them; in each, a is 0.02 above b."""
    base = [0.6, 0.9, 0.7, 0.8]
    rows = rows_of({"a": [v + 0.02 for v in base], "b": base}, {"a": 1.0, "b": 1.0})
    found = verdict(rows)
    assert found.holds is True, found.evidence
    assert "run by run +0.02 better" in found.evidence and "4 runs" in found.evidence


@pytest.mark.parametrize("seed", range(12))
def test_the_verdict_is_the_one_sided_t_test_against_the_margin(seed):
    """Against scipy's one-sample t-test of the differences shifted by the margin: holds
    when "mean > -margin" is significant at 5 %, does not hold when "mean < -margin" is at
    5 %/2 (two others), otherwise inconclusive."""
    rng = np.random.default_rng(seed)
    runs = int(rng.integers(3, 8))
    base = rng.uniform(0.5, 0.9, runs)
    shift = rng.normal(-0.015, 0.025)  # these 12 seeds: 3 hold, 5 do not, 4 inconclusive
    a = base + shift + rng.normal(0, 0.01, runs)
    rows = rows_of({"a": list(a), "b": list(base), "c": list(base)}, dict.fromkeys("abc", 1.0))
    found = verdict(rows, others=("b", "c"), margin=0.01)
    shifted = a - base + 0.01
    above = stats.ttest_1samp(shifted, 0.0, alternative="greater").pvalue < 0.05
    below = stats.ttest_1samp(shifted, 0.0, alternative="less").pvalue < 0.05 / 2
    assert found.holds is (True if above else False if below else None), found.evidence


def test_losses_are_better_lower():
    rows = rows_of({"a": [0.9, 0.8, 0.85], "b": [0.95, 0.85, 0.9]}, {"a": 1.0, "b": 1.0})
    assert verdict(rows).holds is False  # a's accuracy 0.05 below b's in every run
    assert verdict(rows, metric="test_loss").holds is False  # its loss 0.05 above
    assert verdict(rows, algorithm="b", others=("a",), metric="test_loss").holds is True


def test_unequal_bytes_one_run_divergence_and_absence_are_not_forced():
    good = {"a": [0.95, 0.96, 0.97], "b": [0.8, 0.81, 0.82]}
    found = verdict(rows_of(good, {"a": 1.2e6, "b": 1e6}))  # 1.2x b's bytes, tolerance 0.1
    assert found.holds is None and "not at equal bytes" in found.evidence
    assert verdict(rows_of(good, {"a": 1.2e6, "b": 1e6}), tolerance=0.25).holds is True
    one = verdict(rows_of({"a": [0.95], "b": [0.8]}, {"a": 1.0, "b": 1.0}))
    assert one.holds is None and "no spread" in one.evidence
    lost = verdict(rows_of({"a": [np.nan] * 3, "b": [0.8] * 3}, {"a": 1.0, "b": 1.0}))
    assert lost.holds is False and "every run of a diverged" in lost.evidence
    missing = verdict(rows_of(good, {"a": 1.0, "b": 1.0}), others=("nosuch",))
    assert missing.holds is None and "needs nosuch" in missing.evidence
    unknown = verdict(rows_of(good, {"a": 1.0, "b": 1.0}), metric="nosuch")
    assert unknown.holds is None and "no nosuch recorded" in unknown.evidence


def test_a_training_run_takes_training_checks_and_refuses_the_sweeps_in_one_line(tmp_path):
    spec = load_spec("local_digits", quick=True)
    assert spec.panel is None and len(spec.claims) == 1
    copy = tmp_path / "s.toml"
    raw = Path(spec.source).read_text().replace('"matches_at_bytes"', '"steady_below"')
    copy.write_text(raw)
    with pytest.raises(ConfigError, match="check = one of matches_at_bytes"):
        load_spec(copy)
    with pytest.raises(ConfigError, match="margin >= 0"):
        claim(margin=-0.1)


def test_a_training_runs_report_judges_its_claims_on_its_rows(tmp_path):
    spec = load_spec("local_digits", quick=True)
    labels = list(spec.algorithms)
    values = {label: [0.5 + 0.01 * k] * 3 for k, label in enumerate(labels)}
    values = {label: [v + 0.001 * r for r, v in enumerate(vs)] for label, vs in values.items()}
    rows = rows_of(values, dict.fromkeys(labels, 1.0))
    for row in rows:
        row |= {m: 1.0 for m in spec.params.metrics if m not in row}
        row |= {"epoch": row["step"] // 6, "diverged_at": -1, "grad_seconds": 1.0}
        row |= {"other_seconds": 0.1}
    spec = dataclasses.replace(spec, also_report=())
    said: list[str] = []

    def claims(measured):
        return "\n".join(f"{v.holds} {v.evidence}" for _, v in check_claims(spec.claims, measured))

    write_report(spec, rows, tmp_path, modified=True, claims=claims, say=said.append)
    # diloco4's best (lr=0.4) is above dsgd_local4's best (lr=0.7) by 0.04 in every run
    assert "True final test_acc, tuned: diloco4(lr=0.4)" in said[-1]
    assert "vs dsgd_local4(lr=0.7)" in said[-1]
