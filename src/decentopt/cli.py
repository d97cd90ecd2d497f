"""Command-line interface: ``decentopt COMMAND [options]``.

Commands are registered in :data:`COMMANDS` (name -> (help, configure, run)).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from decentopt import __version__, algorithms, problems, theory, topology
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
from decentopt.experiments.scaling import plot_scaling, run_scaling, scaling_markdown
from decentopt.experiments.summary import stats_zeta
from decentopt.experiments.training_config import (
    TrainingConfig,
    plot_training,
    run_training,
    training_summary,
)
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
    p.add_argument("--n", type=int, default=32, help="number of agents (default 32)")
    p.add_argument(
        "--topology",
        default="ring",
        choices=sorted(topology.REGISTRY),
        help="graph (default: the paper's ring)",
    )
    p.add_argument("--c", type=float, default=1.0, help="heterogeneity scale c (default 1)")
    p.add_argument("--sigma2", type=float, default=0.05, help="response noise (default 0.05)")
    p.add_argument("--lr", type=float, default=0.05, help="step size alpha (default 0.05)")
    p.add_argument("--beta", type=float, default=0.9, help="momentum (default 0.9)")
    p.add_argument("--iterations", type=int, default=3000, help="steps (default 3000)")
    p.add_argument("--repetitions", type=int, default=20, help="independent runs (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of data and noise (default 0)")
    p.add_argument(
        "--p", type=float, default=None, help="edge probability (erdos_renyi; default 0.2)"
    )
    p.add_argument(
        "--algorithms",
        default=",".join(algorithms.names()),
        help="comma-separated names (default: all)",
    )
    p.add_argument("--out", type=Path, default=Path("results/compare"), help="output folder")


def _run_compare(args: argparse.Namespace) -> int:
    names = [algorithms.resolve(s.strip()).name for s in args.algorithms.split(",") if s.strip()]
    topo_kwargs: dict[str, object] = {}
    if args.topology == "erdos_renyi":
        topo_kwargs = {"p": 0.2 if args.p is None else args.p, "seed": args.seed}
    elif args.p is not None:
        raise ValueError("--p is the edge probability of erdos_renyi; drop it for other graphs")
    topo = topology.make(args.topology, args.n, **topo_kwargs)
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
        rows,
        "dist_to_opt",
        out / "compare",
        title=(
            f"Quadratic, {topo.name}, c = {args.c:g}, σ² = {args.sigma2:g}, α = {args.lr:g}, "
            f"β = {args.beta:g}, {args.repetitions} repetitions"
        ),
    )
    print(f"wrote {out / 'results.csv'}, {out / 'summary.md'}, " + ", ".join(map(str, files)))
    return 0


# -------------------------------------------------------------------- topology
def _configure_topology(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help=f"one of {', '.join(topology.REGISTRY)}, or 'matrix' with --matrix")
    p.add_argument("--n", type=int, help="number of agents")
    p.add_argument("--weights", help="metropolis or max_degree (ring: also 'paper', the default)")
    p.add_argument("--p", type=float, help="edge probability (erdos_renyi)")
    p.add_argument("--seed", type=int, default=0, help="graph seed (erdos_renyi)")
    p.add_argument("--matrix", type=Path, help="a W saved with numpy.save (.npy) or as text")
    p.add_argument("--L", type=float, default=1.0, help="smoothness constant (default 1)")
    p.add_argument("--beta", type=float, default=0.9, help="momentum (default 0.9)")


def _build_topology(args: argparse.Namespace) -> topology.Topology:
    if args.name == "matrix":
        if args.matrix is None:
            raise ValueError("'matrix' needs --matrix FILE (.npy or a text file of numbers)")
        if not args.matrix.is_file():
            raise FileNotFoundError(f"no matrix file at {args.matrix}")
        loader = np.load if args.matrix.suffix == ".npy" else np.loadtxt
        return topology.from_matrix(loader(args.matrix), name=args.matrix.name)
    if args.n is None:
        raise ValueError(f"give the number of agents: decentopt topology {args.name} --n 32")
    kwargs: dict[str, object] = {}
    if args.weights:
        kwargs["weights"] = args.weights
    if args.name == "erdos_renyi":
        kwargs |= {"p": args.p if args.p is not None else 0.2, "seed": args.seed}
    return topology.make(args.name, args.n, **kwargs)


def _run_topology(args: argparse.Namespace) -> int:
    try:
        topo = _build_topology(args)
    except topology.AssumptionError as exc:
        print(f"Assumption 1: fails -- {exc}")
        return 1
    deg = topo.degrees
    rows = [
        ("topology", topo.name),
        ("n", str(topo.n)),
        ("lambda = ||W - 11^T/n||", f"{topo.lam:.6f}"),
        ("1 - lambda", f"{topo.spectral_gap:.6g}"),
        ("lambda_min(W)", f"{topo.lam_min:.6g}"),
        ("degree (min / mean / max)", f"{deg.min()} / {deg.mean():.2f} / {deg.max()}"),
        ("Assumption 1", "holds (symmetric, doubly stochastic, w_ii > 0, W >= 0)"),
    ]
    if topo.lam < 1:
        nc = theory.nonconvex_step_size(topo.lam, args.beta, L=args.L)
        pl = theory.pl_step_size(topo.lam, args.beta, L=args.L)
        rows += [
            (f"max alpha, Theorem 1 (L={args.L:g}, beta={args.beta:g})", f"{nc:.4g}"),
            (f"max alpha, Theorem 2 (L={args.L:g}, beta={args.beta:g})", f"{pl:.4g}"),
        ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


# ---------------------------------------------------------------------- launch
def _configure_launch(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--nproc", type=int, required=True, help="processes (agents) to start")
    p.add_argument("--threads", type=int, default=1, help="OMP threads per process (default 1)")
    p.add_argument(
        "-m",
        "--module",
        action="store_true",
        help="run SCRIPT as a module, e.g. -m decentopt reproduce fig3 --quick",
    )
    p.add_argument("script", help="a Python script (or a module with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")


def _run_launch(args: argparse.Namespace) -> int:
    """Start N local processes through torchrun (rendezvous on 127.0.0.1, a free port)."""
    import socket
    import subprocess

    if args.nproc < 1:
        raise ValueError("-n must be >= 1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={args.nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        *(["-m"] if args.module else []),
        args.script,
        *args.args,
    ]
    env = os.environ | {"OMP_NUM_THREADS": str(args.threads)}
    print(" ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd, env=env)


# ------------------------------------------------------------ reproduce / run
def _configure_sweep(p: argparse.ArgumentParser, *, preset: bool) -> None:
    if preset:
        choices = [*PRESETS, *STUDIES]
        p.add_argument("source", metavar="TARGET", choices=choices, help=", ".join(choices))
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


def _run_training_command(config: TrainingConfig, out: Path, args: argparse.Namespace) -> int:
    if args.check:
        raise ValueError(f"--check has no recorded claims for {config.name}; omit it")
    rows = run_training(config, out, force=args.force, progress=not args.no_progress)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, rank 0 reports
        return 0
    md = training_summary(rows)
    print(md)
    title = config.title(modified=args.quick or bool(args.overrides))
    write_text_atomic(out / "summary.md", f"# {config.name}: {title}\n\n{md}")
    files = plot_training(rows, out / config.name, title=title)
    print(
        f"{config.name}: wrote {out / 'results.csv'}, {out / 'summary.md'}, "
        + ", ".join(map(str, files))
    )
    return 0


def _reproduce_table1(args: argparse.Namespace) -> int:
    out = args.out or Path("results") / ("table1" + ("-quick" if args.quick else ""))
    rows = run_scaling(seeds=3 if args.quick else 5, quick=args.quick)
    md = scaling_markdown(rows)
    print(md)
    write_csv_atomic(
        out / "table1.csv",
        [
            {
                "quantity": r.quantity,
                "method": r.method,
                "variable": r.variable,
                "paper_exponent": r.paper_exponent,
                "mean": r.mean,
                "spread": r.spread,
                **{f"seed{i}": e for i, e in enumerate(r.exponents)},
            }
            for r in rows
        ],
    )
    write_text_atomic(out / "table1.md", md)
    files = plot_scaling(rows, out / "table1")
    print(f"wrote {out / 'table1.csv'}, {out / 'table1.md'}, " + ", ".join(map(str, files)))
    return 0


#: Reproduction targets that are studies rather than sweeps of a preset.
STUDIES: dict[str, Callable[[argparse.Namespace], int]] = {"table1": _reproduce_table1}


def _run_sweep_command(args: argparse.Namespace) -> int:
    if args.source in STUDIES:
        return STUDIES[args.source](args)
    config = load_config(args.source, quick=args.quick, overrides=args.overrides)
    out = args.out or Path("results") / (config.name + ("-quick" if args.quick else ""))
    if isinstance(config, TrainingConfig):
        return _run_training_command(config, out, args)
    outcome = run_sweep(config, out, force=args.force, progress=not args.no_progress)
    stats = summarise(outcome.rows, config)
    tables = [summary_markdown(stats, config)] + [
        summary_markdown(summarise(outcome.rows, config, extra), config, extra)
        for extra in config.also_report
    ]
    md = "\n".join(tables)
    print(md)
    title = config.title(modified=args.quick or bool(args.overrides))
    report = [f"# {config.name}: {title}", "", md]
    files = plot_curves(
        outcome.rows,
        config.metric,
        out / config.name,
        panel=config.heterogeneity_param,
        panel_title="{key} = {value:g}  (ζ² = {zeta2:.3g})",
        panel_order=sorted({lv for lv, _ in stats}, key=lambda lv: stats_zeta(stats, lv)),
        title=title,
    )
    if args.check:
        verdicts = check_claims(config, stats)
        claims = claims_markdown(verdicts)
        print(claims)
        report += ["## The paper's claims", "", claims]
        counts = [sum(v.holds is x for _, v in verdicts) for x in (True, False, None)]
        print(
            f"{counts[0]} of {len(verdicts)} claims hold in this run, {counts[1]} do not, "
            f"{counts[2]} inconclusive"
        )
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
    "topology": (
        "print a topology's spectral quantities, Assumption 1 and the theorems' step sizes",
        _configure_topology,
        _run_topology,
    ),
    "launch": (
        "start N local processes (one agent each) of a script, through torchrun",
        _configure_launch,
        _run_launch,
    ),
    "reproduce": (
        "reproduce a result of the paper: "
        + ", ".join([*PRESETS, "table1"])
        + " (fig3/fig4 train VGG-11 on CIFAR-10; --quick: digits on the CPU)",
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
    parser.add_argument("--version", action="version", version=f"decentopt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, configure, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        configure(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args))
    except (ConfigError, ValueError, TypeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "\ninterrupted; finished runs are saved and a rerun of the same command resumes",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
