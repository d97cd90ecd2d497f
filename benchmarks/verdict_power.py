"""How often a claim's verdict is right: power on a real difference, errors under the null.

Synthetic sweeps of two methods a and b at three heterogeneity levels: each run's
steady error and settling iteration is a base value times a log-normal factor
``exp(sigma z)``. "Power": a has half b's steady error (or settles in half the
iterations), and the claim "a below b" ("a settles sooner") should hold. "Null": a
and b share one distribution, and any verdict other than "inconclusive" is wrong.
Each cell is the share of ``--trials`` sweeps, for the present rule
(intersection-union: every level at 5 %, Bonferroni only to refute) and the former
one (every level at 5 %/3, both ways). The table in docs/experiments.md is this
script's output.

Usage: python benchmarks/verdict_power.py [--trials 600]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from decentopt.analysis import compare, compare_settling
from decentopt.experiments.claims import check_claims, combine, ordered_verdict, parse_claims
from decentopt.experiments.summary import Stat

LEVELS = (1.0, 0.5, 0.25)
CLAIMS = parse_claims(
    [
        {"text": "below", "check": "steady_below", "algorithm": "a", "others": ["b"]},
        {"text": "sooner", "check": "settles_sooner", "algorithm": "a", "others": ["b"]},
    ],
    "power",
)


def sweep(rng: np.random.Generator, runs: int, sigma: float, ratio: float) -> dict:
    """Stats of a and b (a's steady error and settling iteration ``ratio`` times b's)."""
    stats = {}
    for alg, scale in (("a", ratio), ("b", 1.0)):
        for lv in LEVELS:
            steady = scale * 0.01 / lv * rng.lognormal(0, sigma, runs)
            settle = tuple(np.round(scale * 400 * rng.lognormal(0, sigma, runs)))
            se = float(steady.std(ddof=1) / np.sqrt(runs))
            mean = float(steady.mean())
            stats[(lv, alg)] = Stat(
                mean, se, mean, None, 0, 1 / lv**2, settle=settle, rate=-0.1, runs=runs
            )
    return stats


def former(stats: dict) -> list[bool | None]:
    """The former rule: each level at 5 % / 3 in both directions."""
    m = len(LEVELS)
    pairs = [(stats[(lv, "a")], stats[(lv, "b")]) for lv in LEVELS]
    steady = [
        compare(a.steady, a.steady_se, b.steady, b.steady_se, runs=(a.runs, b.runs), comparisons=m)
        for a, b in pairs
    ]
    settle = [compare_settling(a.settle, b.settle, comparisons=m) for a, b in pairs]
    return [
        combine([ordered_verdict(o, strict=True) for o in orders]) for orders in (steady, settle)
    ]


def table(trials: int) -> None:
    rng = np.random.default_rng(0)
    head = "holds, a 2× better (now / before) | wrong verdict, same distribution (now / before)"
    print(f"| claim | runs | σ | {head} |\n|---|---|---|---|---|")
    lines: dict[int, list[str]] = {0: [], 1: []}
    for runs in (5, 10):
        for sigma in (0.3, 0.5, 1.0):
            counts = np.zeros((2, 4))  # per claim: power now, before; null now, before
            for _ in range(trials):
                real, same = sweep(rng, runs, sigma, 0.5), sweep(rng, runs, sigma, 1.0)
                now = [v.holds for _, v in check_claims(CLAIMS, real)]
                null = [v.holds for _, v in check_claims(CLAIMS, same)]
                before, before_null = former(real), former(same)
                for k in range(2):
                    counts[k] += [
                        now[k] is True,
                        before[k] is True,
                        null[k] is not None,
                        before_null[k] is not None,
                    ]
            for k, p in enumerate(100 * counts / trials):
                lines[k].append(
                    f"| {('steady error below', 'settles sooner')[k]} | {runs} | {sigma} "
                    f"| {p[0]:.0f} % / {p[1]:.0f} % | {p[2]:.1f} % / {p[3]:.1f} % |"
                )
    print("\n".join(lines[0] + lines[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=600)
    args = parser.parse_args()
    start = time.process_time()
    table(args.trials)
    print(f"\n{args.trials} sweeps per cell, 3 levels; {time.process_time() - start:.0f} s of CPU")


if __name__ == "__main__":
    main()
