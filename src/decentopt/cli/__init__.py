"""Command-line interface: ``decentopt COMMAND [options]``.

Commands are registered in :data:`COMMANDS` (name -> (help, configure, run)).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch.distributed as dist

from decentopt import __version__, catalog, plugins
from decentopt.cli.topology import TOPOLOGY_OPTIONS, configure_topology, run_topology
from decentopt.comm.distributed import PeerFailure
from decentopt.distributed.launch import launch
from decentopt.distributed.runtime import StartupError
from decentopt.driver import RunOptions
from decentopt.experiments import ConfigError, load_spec, write_report
from decentopt.experiments.claims import claims_report
from decentopt.experiments.engines import ENGINES
from decentopt.experiments.execution import SweepFailed
from decentopt.experiments.runner import Sweep, say_line
from decentopt.experiments.sources import PAPER_PRESETS, STUDIES, is_study, read_toml
from decentopt.experiments.spec import RunSpec
from decentopt.experiments.studies import run_study
from decentopt.experiments.study import Study, load_study
from decentopt.integrations import loggers
from decentopt.results import FolderBusy

__all__ = ["COMMANDS", "TOPOLOGY_OPTIONS", "build_parser", "main"]


# ---------------------------------------------------------------------- launch
def _configure_launch(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--nproc", type=int, required=True, help="processes (agents) to start")
    p.add_argument("--threads", type=int, default=1, help="OMP threads per process (default 1)")
    p.add_argument(
        "--procs-per-agent",
        type=int,
        default=1,
        metavar="P",
        help="processes per agent, for scripts over dopt.comm.GroupCommunicator: -n 4 "
        "--procs-per-agent 2 runs 2 agents of 2 processes, as torchrun --nnodes 2 "
        "--nproc-per-node 2 (default 1)",
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="K",
        help="restart every process up to K times when one fails; runs resume from their "
        "latest complete checkpoint (default 0)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between SIGTERM and SIGKILL for the processes left when one fails "
        "(default 5)",
    )
    example = "e.g. -m decentopt reproduce fig3 --quick"
    p.add_argument("-m", "--module", action="store_true", help=f"run a module, {example}")
    p.add_argument("script", help="a Python script (or a module with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")


def _run_launch(args: argparse.Namespace) -> int:
    if args.module and args.script in ("decentopt", "decentopt.cli"):
        _check_launched(args.args)
    keys = ("module", "threads", "max_restarts", "grace", "procs_per_agent")
    options = {k: getattr(args, k) for k in keys}
    return launch(args.nproc, args.script, args.args, **options)


def _check_launched(argv: list[str]) -> None:
    """Read the specification a launched ``decentopt run`` (``reproduce``, ``compare``) will
    run, here, before any process starts: a mistake is one line once, not one per rank after
    every rank has started. Arguments its own parser refuses are left to the ranks."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            inner = build_parser().parse_args(argv)
    except SystemExit:
        return
    if inner.command not in ("run", "reproduce", "compare"):
        return
    for plugin in inner.plugin:
        plugins.load(plugin)
    _load(inner)


def _load(args: argparse.Namespace) -> Study | RunSpec:
    """The study or the specification ``args.source`` names, read and checked."""
    if is_study(read_toml(args.source)[0]):
        return load_study(args.source, quick=args.quick)
    return load_spec(args.source, quick=args.quick, overrides=args.overrides)


# ------------------------------------------------------------ reproduce / run
def _configure_run(p: argparse.ArgumentParser, *, choices: list[str] | None) -> None:
    if choices is None:
        p.add_argument(
            "source", metavar="CONFIG", help="a TOML specification or study (docs/experiments.md)"
        )
    elif choices:
        p.add_argument("source", metavar="TARGET", choices=choices, help=", ".join(choices))
    else:
        p.set_defaults(source="compare")
    p.add_argument("--quick", action="store_true", help="apply the config's [quick] overrides")
    p.add_argument("--check", action="store_true", help="check the paper's claims on the results")
    example = "e.g. --set iterations=500 --set algorithms.edm.beta=0.95"
    kw = {"dest": "overrides", "action": "append", "default": [], "metavar": "KEY=VALUE"}
    p.add_argument("--set", help=f"override a config value, {example}", **kw)
    p.add_argument("--only", metavar="A,B", help="run only these algorithms (their labels)")
    cores = os.cpu_count() or 1
    jobs_help = (
        f"worker processes for the units of a convex sweep or of CPU training, or of a local "
        f"dask cluster (default: {cores}, the cores)"
    )
    p.add_argument("--jobs", type=int, metavar="N", help=jobs_help)
    p.add_argument(
        "--executor",
        choices=["local", *ENGINES],
        help="where the units run: local forked workers (the default), a SLURM cluster through "
        "submitit, or a dask cluster; set up by [executor] (docs/experiments.md)",
    )
    p.add_argument("--out", type=Path, help="output folder (default results/NAME[-quick])")
    p.add_argument("--force", action="store_true", help="rerun finished runs instead of resuming")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    log_help = "also log every run there: tensorboard:DIR, wandb:PROJECT, mlflow:URI, jsonl:DIR"
    p.add_argument("--log", action="append", default=[], metavar="NAME:TARGET", help=log_help)
    every = "steps between progress lines of a distributed run (default: 20 lines a run)"
    p.add_argument("--log-every", type=int, metavar="N", help=every)
    _configure_plugins(p)
    p.add_argument(
        "--x",
        choices=list(X_AXES),
        help="horizontal axis of the curves: iterations (the default; a study: its own x), "
        "gossip rounds, bytes sent per agent, or modelled time (the spec's [network], or its "
        "[timing] time model)",
    )


#: --x choices -> result columns
X_AXES = {
    "iterations": "step",
    "rounds": "rounds",
    "bytes": "bytes_per_agent",
    "time": "model_time",
}


def _run_command(args: argparse.Namespace) -> int:
    for flag, value in (("--jobs", args.jobs), ("--log-every", args.log_every)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1; got {value}")
    # how the runs of this command are carried out: built once, passed down whole
    options = RunOptions(
        progress=not args.no_progress,
        jobs=args.jobs or os.cpu_count() or 1,
        force=args.force,
        log=say_line,
        log_every=args.log_every,
    )
    loaded = _load(args)
    out = args.out or Path("results") / (loaded.name + ("-quick" if args.quick else ""))
    only = None if args.only is None else [s.strip() for s in args.only.split(",") if s.strip()]
    if isinstance(loaded, Study):
        if args.executor not in (None, "local"):
            raise ValueError(
                f"--executor {args.executor}: a study runs here; give --executor to the run of "
                "one of its specifications instead"
            )
        monitor = loggers.make(args.log)  # each unit of each part, grouped by the part
        files = run_study(
            loaded,
            out,
            options.but(monitor=monitor),
            quick=args.quick,
            sets=args.overrides,
            only=only,
            check=args.check,
            x=X_AXES.get(args.x),
        )
        monitor.figures(files, group=loaded.name)
        print("wrote " + ", ".join(map(str, files)))
        return 0
    spec = loaded if only is None else loaded.select(only)
    if args.check and not spec.claims:
        raise ValueError(
            f"--check: {spec.name} states no claims; omit --check, or add [[claims]] tables "
            "(docs/experiments.md)"
        )
    if args.jobs is not None:  # the flag sizes a local dask cluster before [executor] workers
        spec = replace(spec, executor={k: v for k, v in spec.executor.items() if k != "workers"})
    monitor = loggers.make([*args.log, *loggers.targets(spec.logging)])
    outcome = Sweep(spec, out, options.but(monitor=monitor), executor=args.executor).run()
    if not outcome.main:  # under torchrun, rank 0 reports
        return 0
    claims = partial(claims_report, spec.claims) if args.check else None
    modified = args.quick or bool(args.overrides)
    x = X_AXES[args.x or "iterations"]
    files = write_report(spec, outcome.rows, out, modified=modified, claims=claims, x=x)
    monitor.figures(files, group=spec.name)
    print(
        f"{spec.name}: {len(outcome.ran)} unit(s) computed, {len(outcome.kept)} resumed, "
        f"{outcome.seconds:.1f} s; wrote " + ", ".join(map(str, files))
    )
    return 0


# --------------------------------------------------------------------- plugins
def _configure_plugins(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="load users' own methods first: a module name (mypkg.methods) or a .py file; "
        "repeatable (docs/extending.md)",
    )


def _configure_methods(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME", help="only these methods (default: all)")
    _configure_plugins(p)


def _run_methods(args: argparse.Namespace) -> int:
    print(catalog.render(args.names))  # an unknown name is refused in one line
    return 0


COMMANDS: dict[
    str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = {
    "compare": (
        "run every algorithm on the paper's quadratic problem (the 'compare' preset; "
        "change it with --set, e.g. --set agents=64 --set problem_params.c=[0.5])",
        lambda p: _configure_run(p, choices=[]),
        _run_command,
    ),
    "topology": (
        "print a topology's spectral quantities, Assumption 1 and the theorems' step sizes",
        configure_topology,
        run_topology,
    ),
    "launch": (
        "start N local processes (one agent each) of a script, supervised; --max-restarts K "
        "restarts them all when one fails (runs resume from their checkpoints)",
        _configure_launch,
        _run_launch,
    ),
    "reproduce": (
        "reproduce a result of the paper: "
        + ", ".join([*PAPER_PRESETS, *STUDIES])
        + " (fig3/fig4 train VGG-11 on CIFAR-10; --quick: digits on the CPU)",
        lambda p: _configure_run(p, choices=[*PAPER_PRESETS, *STUDIES]),
        _run_command,
    ),
    "run": (
        "run the experiment described by a TOML specification or study file",
        lambda p: _configure_run(p, choices=None),
        _run_command,
    ),
    "methods": (
        "list every registered method, built-in and from plugins: reference, "
        "hyper-parameters with defaults, graphs it needs, gossips it composes with",
        _configure_methods,
        _run_methods,
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


#: What to do about a refusal of the file system, by its cause (errno).
_FIXES = {
    errno.ENAMETOOLONG: "a file or folder name is longer than the file system allows (255 bytes "
    "a name on most); shorten the label or name it comes from",
    errno.EISDIR: "a folder is where a file must be written; move that folder away",
    errno.ENOTDIR: "a file is where a folder must be; give --out a writable folder or move "
    "the file",
    errno.EACCES: "no permission to write there; give --out a folder you may write to",
    errno.EPERM: "no permission to write there; give --out a folder you may write to",
    errno.EROFS: "the file system is read-only; give --out a writable folder",
    errno.ENOSPC: "the disk is full; free space or give --out a folder on another disk",
    errno.EDQUOT: "the disk quota is used up; free space or give --out a folder on another disk",
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        for reason in plugins.load_entry_points().values():  # a broken one is not fatal
            print(f"warning: {reason}; its methods are unavailable", file=sys.stderr)
        for spec in getattr(args, "plugin", None) or []:  # then --plugin
            plugins.load(spec)
        return int(args._run(args))
    except (ConfigError, ValueError, TypeError, FileNotFoundError, FolderBusy) as exc:
        said = str(exc)
        broken = plugins.failures()  # an unknown method may be one of a plugin that failed
        if broken and ("unknown algorithm" in said or "unknown method" in said):
            said += f" (installed plugins that failed to load: {', '.join(broken)})"
        print(f"error: {said}", file=sys.stderr)
        return 2
    except OSError as exc:  # the file system refused: a path that is a file, no permission, full
        fix = _FIXES.get(exc.errno or 0, "give --out a writable folder with free space")
        where = exc.filename or "the output folder"
        print(
            f"error: {exc.strerror or exc} ({where}); {fix}. Units finished before are saved "
            "and a rerun resumes.",
            file=sys.stderr,
        )
        return 2
    except (PeerFailure, StartupError, dist.DistError, SweepFailed) as exc:  # a rank, worker or job
        text = " ".join(str(exc).split())
        print(f"error: {text}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        note = "finished runs are saved and a rerun of the same command resumes"
        print(f"\ninterrupted; {note}", file=sys.stderr)
        return 130
