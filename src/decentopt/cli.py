"""Command-line interface: ``decentopt COMMAND [options]``.

Commands are registered in :data:`COMMANDS` (name -> (configure, run)).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from decentopt import algorithms, problems, topology
from decentopt.experiments import (
    PRESETS,
    ConfigError,
    check_claims,
    claims_markdown,
    load_config,
    run_sweep,
    summarise,
    summary_markdown,
)
from decentopt.experiments.summary import stats_zeta
from decentopt.plotting import LABELS, plot_curves
from decentopt.results import tidy_rows, write_csv_atomic, write_text_atomic
from decentopt.simulate import simulate

__all__ = ["COMMANDS", "main"]


def hyperparams_for(name: str, lr: float, beta: float) -> dict[str, float]:
    """``lr`` for every method and ``beta`` for those with momentum."""
    hp = {"lr": lr}
    if algorithms.REGISTRY[name].uses_momentum:
        hp["beta"] = beta
    return hp


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _fmt(values: np.ndarray) -> str:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return "diverged"
    return f"{finite.mean():.3e} ± {finite.std():.1e}"


# --------------------------------------------------------------------- compare
def _configure_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=32, help="agents on the paper's ring (default 32)")
    p.add_argument("--c", type=float, default=1.0, help="heterogeneity scale c (default 1)")
    p.add_argument("--sigma2", type=float, default=0.05, help="response noise (default 0.05)")
    p.add_argument("--lr", type=float, default=0.05, help="step size alpha (default 0.05)")
    p.add_argument("--beta", type=float, default=0.9, help="momentum (default 0.9)")
    p.add_argument("--iterations", type=int, default=3000, help="steps (default 3000)")
    p.add_argument("--repetitions", type=int, default=20, help="independent runs (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of data and noise (default 0)")
    p.add_argument(
        "--algorithms",
        default=",".join(algorithms.names()),
        help="comma-separated names (default: all)",
    )
    p.add_argument("--out", type=Path, default=Path("results/compare"), help="output folder")


def _run_compare(args: argparse.Namespace) -> int:
    names = [s.strip() for s in args.algorithms.split(",") if s.strip()]
    for name in names:
        if name not in algorithms.REGISTRY:
            raise SystemExit(
                f"error: unknown algorithm {name!r}; choose from {', '.join(algorithms.names())}"
            )
    topo = topology.ring(args.n)
    prob = problems.Quadratic.paper(
        n=args.n, c=args.c, sigma2=args.sigma2, repetitions=args.repetitions, seed=args.seed
    )
    print(
        f"Quadratic (paper, Figure 1): {topo!r}, d=10, p=20, c={args.c}, sigma2={args.sigma2}, "
        f"zeta2={float(prob.zeta2.mean()):.3g}, alpha={args.lr}, beta={args.beta}, "
        f"{args.iterations} iterations x {args.repetitions} repetitions"
    )
    rows, table = [], []
    from tqdm.auto import tqdm

    for name in tqdm(names, desc="algorithms", disable=None):
        alg = algorithms.make(name, **hyperparams_for(name, args.lr, args.beta))
        res = simulate(alg, prob, topo, args.iterations, seed=args.seed + 1, progress=True)
        rows += tidy_rows(res, {"c": args.c})
        table.append(
            [
                LABELS.get(name, name),
                _fmt(res.final("dist_to_opt")),
                _fmt(res.final("grad_norm")),
                _fmt(res.final("consensus")),
                str(int(res.diverged.sum())),
                f"{res.wall_time:.2f}",
            ]
        )
    header = ["method", "final dist. to x*", "final ‖∇f(x̄)‖²", "consensus", "diverged", "s"]
    md = markdown_table(header, table)
    print(md)
    out = Path(args.out)
    write_csv_atomic(out / "results.csv", rows)
    write_text_atomic(out / "summary.md", md + "\n")
    files = plot_curves(
        rows, "dist_to_opt", out / "compare", title=f"Quadratic, ring n={args.n}, c={args.c}"
    )
    print(f"wrote {out / 'results.csv'}, {out / 'summary.md'}, " + ", ".join(map(str, files)))
    return 0


# ------------------------------------------------------------ reproduce / run
def _configure_sweep(p: argparse.ArgumentParser, *, preset: bool) -> None:
    if preset:
        p.add_argument(
            "source", metavar="FIGURE", choices=PRESETS, help=f"one of {', '.join(PRESETS)}"
        )
    else:
        p.add_argument("source", metavar="CONFIG", help="a TOML file (see docs/experiments.md)")
    p.add_argument("--quick", action="store_true", help="apply the config's [quick] overrides")
    p.add_argument("--check", action="store_true", help="check the paper's claims on the results")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set iterations=500 --set algorithms.edm.beta=0.95",
    )
    p.add_argument("--out", type=Path, help="output folder (default results/NAME[-quick])")
    p.add_argument("--force", action="store_true", help="rerun finished runs instead of resuming")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _run_sweep_command(args: argparse.Namespace) -> int:
    config = load_config(args.source, quick=args.quick, overrides=args.overrides)
    out = args.out or Path("results") / (config.name + ("-quick" if args.quick else ""))
    outcome = run_sweep(config, out, force=args.force, progress=not args.no_progress)
    stats = summarise(outcome.rows, config)
    md = summary_markdown(stats, config)
    print(md)
    report = [f"# {config.name}: {config.description}", "", md]
    files = plot_curves(
        outcome.rows,
        config.metric,
        out / config.name,
        panel=config.heterogeneity_param,
        panel_title="{key} = {value:g}  (ζ² = {zeta2:.3g})",
        panel_order=sorted({lv for lv, _ in stats}, key=lambda lv: stats_zeta(stats, lv)),
        title=config.description,
    )
    if args.check:
        verdicts = check_claims(config, stats)
        claims = claims_markdown(verdicts)
        print(claims)
        report += ["## The paper's claims", "", claims]
        held = sum(v.holds is True for _, v in verdicts)
        print(f"{held} of {len(verdicts)} claims hold in this run")
    write_text_atomic(out / "summary.md", "\n".join(report))
    print(
        f"{config.name}: {len(outcome.ran)} run(s) computed, {len(outcome.skipped)} resumed, "
        f"{outcome.seconds:.1f} s; wrote {out / 'results.csv'}, {out / 'summary.md'}, "
        + ", ".join(map(str, files))
    )
    return 0


COMMANDS: dict[
    str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = {
    "compare": (
        "run all algorithms on the paper's quadratic problem; print a table, write a plot",
        _configure_compare,
        _run_compare,
    ),
    "reproduce": (
        "reproduce a figure of the paper (fig1, fig2) from its preset",
        lambda p: _configure_sweep(p, preset=True),
        _run_sweep_command,
    ),
    "run": (
        "run the sweep described by a TOML configuration file",
        lambda p: _configure_sweep(p, preset=False),
        _run_sweep_command,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="decentopt", description="Decentralized stochastic optimization: EDM and baselines."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, configure, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        configure(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    try:
        code = args._run(args)
    except (ConfigError, ValueError, TypeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"done in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
