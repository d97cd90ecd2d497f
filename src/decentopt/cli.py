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
from decentopt.plotting import LABELS, plot_curves
from decentopt.results import tidy_rows, write_csv_atomic
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
    (out / "summary.md").write_text(md + "\n")
    files = plot_curves(
        rows, "dist_to_opt", out / "compare", title=f"Quadratic, ring n={args.n}, c={args.c}"
    )
    print(f"wrote {out / 'results.csv'}, {out / 'summary.md'}, " + ", ".join(map(str, files)))
    return 0


COMMANDS: dict[
    str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = {
    "compare": (
        "run all algorithms on the paper's quadratic problem; print a table, write a plot",
        _configure_compare,
        _run_compare,
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
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"done in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
