"""Time of a report's figure and result table: two checkouts in one process, interleaved.

A Figure-1-shaped table (8 methods x 4 panels x 5 runs x the log-spaced record steps of
1,500 iterations) is drawn by ``plotting.plot_curves`` (PNG + PDF) and written by
``results.write_csv_atomic``, by the ``src`` of this checkout and of ``--other`` (e.g. the
main checkout's), one after the other in each round; the tables must be byte-identical.

Run: ``.venv/bin/python benchmarks/bench_reports.py --other ../previous/src [--repeats 5]``
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(HERE))

from decentopt.simulate import record_steps  # noqa: E402

METHODS = ("dsgd", "dmsgd", "decentlam", "qg_dsgdm", "dsgt", "dsgt_hb", "ed", "edm")


def table() -> list[dict]:
    """Rows of the shape a Figure-1 sweep writes (decaying errors, a few diverged steps)."""
    rng = np.random.default_rng(0)
    rows = []
    for c in (2.0, 1.0, 0.5, 0.25):
        for k, alg in enumerate(METHODS):
            for run in range(5):
                for step in record_steps(1500, "log"):
                    err = float(0.3 / (1 + step) ** (0.2 + 0.1 * k) * rng.lognormal(0, 0.1))
                    rows.append({"c": c, "zeta2": 4.0 / c, "run": run, "algorithm": alg,
                                 "step": int(step), "dist_to_opt": err, "rounds": int(step),
                                 "lr": 0.05, "wall_seconds": float(rng.random())})  # fmt: skip
    return rows


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", required=True, help="another checkout's src folder")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    other = Path(args.other).resolve() / "decentopt"
    versions = {
        "this": (load("this_plotting", HERE / "decentopt/plotting.py"),
                 load("this_results", HERE / "decentopt/results.py")),
        "other": (load("other_plotting", other / "plotting.py"),
                  load("other_results", other / "results.py")),
    }  # fmt: skip
    rows, out = table(), Path(tempfile.mkdtemp())
    seconds: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, (plotting, results) in versions.items():
            start = time.perf_counter()
            plotting.plot_curves(rows, "dist_to_opt", out / name, panel="c", title="bench")
            seconds.setdefault(f"figure {name}", []).append(time.perf_counter() - start)
            start = time.perf_counter()
            results.write_csv_atomic(out / f"{name}.csv", rows)
            seconds.setdefault(f"table {name}", []).append(time.perf_counter() - start)
        if (out / "this.csv").read_bytes() != (out / "other.csv").read_bytes():
            raise SystemExit("the two tables differ")
    for key, values in seconds.items():
        print(f"{key:13s} min {min(values):6.2f} s  median {statistics.median(values):6.2f} s")
    for part in ("figure", "table"):
        mine, theirs = seconds[f"{part} this"], seconds[f"{part} other"]
        ratio = min(mine) / min(theirs), statistics.median(mine) / statistics.median(theirs)
        print(f"{part}: this / other  min {ratio[0]:.2f}  median {ratio[1]:.2f}")


if __name__ == "__main__":
    main()
