"""Wall time of the paper's convex studies from the command line, quick and full.

Each ``decentopt reproduce STUDY [--quick]`` runs in a fresh process (library loading and
the native build check included, as a user sees it), writes into a temporary folder that
is removed afterwards, and uses ``--jobs`` at its default. ``--src PATH`` puts another
checkout's ``src`` first on ``PYTHONPATH``, so that two versions can be timed on the same
machine one after the other (the native library is built at first use into its cache: a
first warm-up run per checkout keeps that out of the timing). ``--against PATH`` times a
second checkout in the same run, interleaved with the first study by study (a slow
spell of a shared machine then falls on both), and prints the ratio.

Run: ``.venv/bin/python benchmarks/bench_studies.py [--src PATH] [--against PATH]
[--quick-only] [--full-only] [--studies fig1,fig2] [--repeats N]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STUDIES = ("fig1", "fig2", "table1", "methods", "topologies", "compression")


def seconds(study: str, quick: bool, env: dict[str, str]) -> float:
    """Wall time of one ``decentopt reproduce`` in a fresh process and a fresh folder."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "decentopt", "reproduce", study, "--out", out]
        command += ["--no-progress", *(["--quick"] if quick else [])]
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{' '.join(command[2:4])} failed: {' / '.join(tail)}")
    return elapsed


def environment(src: str | None) -> tuple[dict[str, str], str]:
    """The child processes' environment and which ``decentopt`` they import."""
    env = dict(os.environ)
    if src:
        path = str(Path(src).resolve())
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
    probe = subprocess.run(
        [sys.executable, "-c", "import decentopt; print(decentopt.__file__)"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return env, probe.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="a checkout's src folder to time (default: as installed)")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--quick-only", action="store_true", help="only the --quick runs")
    only.add_argument("--full-only", action="store_true", help="only the full-length runs")
    parser.add_argument("--studies", default=",".join(STUDIES), help="comma-separated")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each (median shown)")
    parser.add_argument("--against", help="another checkout's src, timed interleaved")
    args = parser.parse_args()
    versions = [environment(args.src)] + ([environment(args.against)] if args.against else [])
    studies = [s.strip() for s in args.studies.split(",") if s.strip()]
    modes = (True,) if args.quick_only else (False,) if args.full_only else (True, False)
    for _, where in versions:
        print(f"decentopt from {where}; {os.cpu_count()} cores; --jobs at its default")
    for env, _ in versions:  # warm-up: a first-use native build stays out of the table
        seconds(studies[0], True, env)
    head = "".join(f" {'median':>8} {'min':>7}" for _ in versions)
    print(
        f"{'study':<12} {'mode':<6}{head} {'runs':>5}" + ("  against/src" if args.against else "")
    )
    for study in studies:
        for quick in modes:
            times: list[list[float]] = [[] for _ in versions]
            for _ in range(args.repeats):
                for (env, _), found in zip(versions, times, strict=True):
                    found.append(seconds(study, quick, env))
            cells = "".join(f" {statistics.median(t):>8.1f} {min(t):>7.1f}" for t in times)
            ratio = (
                f"  {statistics.median(times[1]) / statistics.median(times[0]):.2f}x"
                if args.against
                else ""
            )
            mode = "quick" if quick else "full"
            print(f"{study:<12} {mode:<6}{cells} {args.repeats:>5}{ratio}", flush=True)


if __name__ == "__main__":
    main()
