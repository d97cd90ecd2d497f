"""Each logger read back from what it wrote, against the sweep's own results."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import decentopt as dopt
from decentopt.cli import main
from decentopt.comm.simulated import SimulatedCommunicator
from decentopt.driver import RunOptions, run_loop
from decentopt.experiments import ConfigError, load_spec
from decentopt.integrations import loggers
from decentopt.integrations.loggers.jsonl import read_jsonl
from decentopt.plan import Plan
from decentopt.results import read_csv
from tests.experiments.test_spec import BASE, write
from tests.integrations import readers


def quiet(_: str) -> None:
    pass


def scalar_steps(lines: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """step -> every value logged at it."""
    out: dict[int, dict[str, float]] = {}
    for e in lines:
        if e["event"] == "scalars":
            out.setdefault(e["step"], {}).update(e["values"])
    return out


def expected_tag(row: dict[str, Any], metric: str) -> str:
    """The tag of a result row's column, built from the row (not by the logger's code)."""
    return f"{metric}/c:{row['c']:.6g}/zeta2:{row['zeta2']:.6g}/run:{row['run']}"


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    """The tiny sweep (2 units, 2 levels x 2 runs as columns) logged by all four loggers:
    three from --log, W&B (offline) from the specification's [logging] table."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wb").mkdir()
    text = BASE.replace("[topology]", '[logging]\nwandb = "tiny-project"\n[topology]')
    path = write(tmp_path, text)
    logs = ["--log", "jsonl:lines", "--log", "tensorboard:tb", "--log", "mlflow:ml"]
    assert main(["run", str(path), "--out", "o", "--no-progress", "--jobs", "1", *logs]) == 0
    return tmp_path


def test_json_lines_hold_every_row_of_every_unit_and_its_parameters(sweep):
    rows = read_csv(sweep / "o" / "results.csv")
    for unit in ("ed", "edm"):
        lines = read_jsonl(sweep / "lines" / "tiny" / f"{unit}.jsonl")
        assert lines[0]["event"] == "start" and lines[-1]["event"] == "finish"
        params = lines[0]["params"]
        assert params["method"] == unit and params["graph.name"] == "ring"
        assert (
            params["seed"] == 1 and params["spec.agents"] == 6 and params["hyperparams.lr"] == 0.05
        )
        steps = scalar_steps(lines)
        mine = [r for r in rows if r["algorithm"] == unit]
        assert sorted(steps) == sorted({r["step"] for r in mine})
        for r in mine:
            values = steps[r["step"]]
            for metric in ("dist_to_opt", "consensus"):
                assert values[expected_tag(r, metric)] == pytest.approx(r[metric], rel=1e-12)
            assert values["rounds"] == r["rounds"]
            assert values["bytes_per_agent"] == pytest.approx(r["bytes_per_agent"])
    figures = read_jsonl(sweep / "lines" / "tiny" / "figures.jsonl")
    assert [e["name"] for e in figures if e["event"] == "figure"] == ["tiny"]


def test_tensorboard_event_files_read_back_as_the_json_lines(sweep):
    for unit in ("ed", "edm"):
        lines = read_jsonl(sweep / "lines" / "tiny" / f"{unit}.jsonl")
        steps = scalar_steps(lines)
        board = readers.tensorboard_scalars(sweep / "tb" / "tiny" / unit)
        assert set(board) == set(next(iter(steps.values())))
        for tag, points in board.items():
            assert [s for s, _ in points] == sorted(steps)  # each step once, in order
            want = [steps[s][tag] for s, _ in points]
            np.testing.assert_allclose([v for _, v in points], want, rtol=1e-6)  # float32
        params = json.loads(readers.tensorboard_text(sweep / "tb" / "tiny" / unit, "params"))
        assert params == lines[0]["params"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    images = EventAccumulator(str(sweep / "tb" / "tiny" / "figures"))
    images.Reload()
    assert images.Tags()["images"] == ["tiny"]


def test_the_mlflow_file_store_reads_back_as_the_json_lines(sweep):
    client = readers.mlflow_client(sweep / "ml")
    experiment = client.get_experiment_by_name("tiny")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"tiny/ed", "tiny/edm", "tiny/figures"}
    for unit in ("ed", "edm"):
        run = runs[f"tiny/{unit}"]
        steps = scalar_steps(read_jsonl(sweep / "lines" / "tiny" / f"{unit}.jsonl"))
        assert run.data.params["method"] == unit and run.data.params["seed"] == "1"
        assert run.info.status == "FINISHED"
        for tag in ("dist_to_opt/c:1/zeta2:2.08016/run:0", "rounds", "lr"):
            history = client.get_metric_history(run.info.run_id, tag)
            assert [m.step for m in history] == sorted(steps)
            assert [m.value for m in history] == [steps[m.step][tag] for m in history]
    figures = client.list_artifacts(runs["tiny/figures"].info.run_id, "figures")
    assert [Path(f.path).name for f in figures] == ["tiny.png"]


def test_an_offline_wandb_run_reads_back_as_the_json_lines(sweep):
    runs = readers.wandb_run(sweep / "wb")
    by_name = {r["name"]: r for r in runs.values()}
    assert {"tiny/ed", "tiny/edm"} <= set(by_name)
    for unit in ("ed", "edm"):
        run = by_name[f"tiny/{unit}"]
        assert run["group"] == "tiny" and run["config"]["method"] == unit
        steps = scalar_steps(read_jsonl(sweep / "lines" / "tiny" / f"{unit}.jsonl"))
        logged = {row["step"]: row for row in run["history"] if "step" in row}
        assert sorted(logged) == sorted(steps)
        for step, values in steps.items():
            assert {k: logged[step][k] for k in values} == values


def edm_run(monitor: Any, **options: Any) -> Any:
    """EDM on a small noisy quadratic: 60 steps in epochs of 10 (a checkpoint each), a
    record every 5 steps."""
    prob = dopt.problems.Quadratic.paper(n=6, d=3, p=4, sigma2=0.1, repetitions=1, seed=1)
    comm = SimulatedCommunicator(dopt.topology.ring(6))
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    plan = Plan(60, tuple(range(0, 61, 5)), period=10)
    grad = lambda x, g: (prob.gradient(x, g), None)  # noqa: E731
    opts = RunOptions(seed=3, log=quiet, monitor=monitor, **options)
    return run_loop(alg, prob, comm, plan, opts, gradient=grad, labels=[{"run": 0}])


def test_a_resumed_run_is_one_run_with_continuous_steps(tmp_path):
    """Stopped after step 35 (its last checkpoint at 30, records up to 35 logged), then
    resumed: each logger holds one run whose steps 0, 5, ..., 60 appear once each, with
    the values of an uninterrupted run."""
    full = edm_run(None)
    want = {r.step: float(r.metrics["dist_to_opt"][0]) for r in full.records}
    targets = [
        f"jsonl:{tmp_path / 'lines'}",
        f"tensorboard:{tmp_path / 'tb'}",
        f"mlflow:{tmp_path / 'ml'}",
    ]
    first = loggers.make(targets).bind("edm", "study", {"method": "edm"})
    edm_run(first, checkpoint_dir=tmp_path / "ckpt", stop_after=35)
    second = loggers.make(targets).bind("edm", "study", {"method": "edm"})
    resumed = edm_run(second, checkpoint_dir=tmp_path / "ckpt")
    assert resumed.resumed_from == 30
    lines = read_jsonl(tmp_path / "lines" / "study" / "edm.jsonl")
    logged = [e["step"] for e in lines if e["event"] == "scalars"]
    assert logged == sorted(want)
    assert [e.get("resumed_from") for e in lines if e["event"] == "start"] == [None, 30]
    assert {s: v["dist_to_opt"] for s, v in scalar_steps(lines).items()} == want
    board = readers.tensorboard_scalars(tmp_path / "tb" / "study" / "edm")["dist_to_opt"]
    assert [s for s, _ in board] == sorted(want)
    np.testing.assert_allclose([v for _, v in board], [want[s] for s, _ in board], rtol=1e-6)
    client = readers.mlflow_client(tmp_path / "ml")
    runs = client.search_runs([client.get_experiment_by_name("study").experiment_id])
    assert len(runs) == 1
    history = client.get_metric_history(runs[0].info.run_id, "dist_to_opt")
    assert [(m.step, m.value) for m in history] == sorted(want.items())


#: One W&B process of the resume test: the run stopped after step 30, or its restart.
WANDB_PART = """
import sys
from decentopt.integrations import loggers
from tests.integrations.test_loggers import edm_run
stop = int(sys.argv[2]) if len(sys.argv) > 2 else None
edm_run(loggers.make(["wandb:p"]).bind("edm", "study"), checkpoint_dir=sys.argv[1],
        stop_after=stop)
"""


@pytest.mark.slow  # two processes, one after the other
def test_a_resumed_wandb_run_continues_the_same_run(tmp_path):
    """Two processes, as an interrupted job and its restart: one W&B run (one id), its
    history the steps of both, each once."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    env = os.environ | {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root), env.get("PYTHONPATH", "")])
    for extra in (["30"], []):
        command = [sys.executable, "-c", WANDB_PART, str(tmp_path / "c"), *extra]
        proc = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
    runs = readers.wandb_run(tmp_path)
    assert len(runs) == 1  # one id: the second start continues the first's run
    (run,) = runs.values()
    assert len(run["files"]) == 2  # an offline folder per process, synced as one run
    assert [row["step"] for row in run["history"] if "step" in row] == list(range(0, 61, 5))


def test_a_finished_simulation_is_logged_with_its_simulated_time(tmp_path):
    prob = dopt.problems.Quadratic.paper(n=4, d=2, p=3, sigma2=0.0, repetitions=2, seed=0)
    alg = dopt.algorithms.make("edm", lr=0.05, beta=0.9)
    timing = dopt.driver.TimeModel(compute=0.01, slow=(1,), factor=4.0)
    res = dopt.simulate(
        alg, prob, dopt.topology.ring(4), iterations=20, record="all", timing=timing
    )
    loggers.make([f"jsonl:{tmp_path}"]).result(res, name="edm", params={"lr": 0.05})
    steps = scalar_steps(read_jsonl(tmp_path / "edm.jsonl"))
    rows = res.rows
    for r in rows:
        values = steps[r["step"]]
        assert values[f"dist_to_opt/run:{r['run']}"] == r["dist_to_opt"]
        assert values["sim_time"] == r["sim_time"]


def test_an_absent_extra_and_an_unknown_logger_are_refused_in_one_line(
    tmp_path, monkeypatch, capsys
):
    for name, module in (("tensorboard", "tensorboard"), ("wandb", "wandb"), ("mlflow", "mlflow")):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
        with pytest.raises(loggers.MissingExtra, match=rf"pip install decentopt\[{name}\]$"):
            loggers.make_logger(f"{name}:x")
    with pytest.raises(ValueError, match="unknown logger 'tensorbord'; known: tensorboard"):
        loggers.make_logger("tensorbord:x")
    out = tmp_path / "o"
    assert main(["run", str(write(tmp_path, BASE)), "--out", str(out), "--log", "mlflow:m"]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "error: the mlflow logger needs the package 'mlflow': pip install decentopt[mlflow]\n"
    )
    assert not out.exists()  # refused before anything ran
    bad = BASE.replace("[topology]", '[logging]\nmlfow = "ml"\n[topology]')
    with pytest.raises(ConfigError, match=r"\[logging\]: unknown logger 'mlfow'"):
        load_spec(write(tmp_path, bad))


def test_a_users_logger_comes_from_the_entry_point_group(tmp_path, monkeypatch, capsys):
    """An installed distribution's ``decentopt.loggers`` entry point, named in [logging]."""
    (tmp_path / "my_logger.py").write_text(
        "import json\n"
        "from decentopt.integrations.loggers import Logger\n"
        "class Mine(Logger):\n"
        "    def __init__(self, target): self.path = target\n"
        "    def start(self, run): self.f = open(self.path, 'a'); self.f.write(run.key + '\\n')\n"
        "    def scalars(self, step, values): self.f.write(f'{step}\\n')\n"
        "    def figure(self, name, path): self.f.write(name + '\\n')\n"
        "    def finish(self): self.f.close()\n"
    )
    info = tmp_path / "my_logger-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-logger\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[decentopt.loggers]\nmine = my_logger:Mine\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "mine" in loggers.names()
    text = BASE.replace("[topology]", f'[logging]\nmine = "{tmp_path / "log.txt"}"\n[topology]')
    out = tmp_path / "o"
    assert (
        main(
            [
                "run",
                str(write(tmp_path, text)),
                "--out",
                str(out),
                "--no-progress",
                "--jobs",
                "1",
                "--only",
                "edm",
            ]
        )
        == 0
    )
    written = (tmp_path / "log.txt").read_text().split()
    steps = sorted({r["step"] for r in read_csv(out / "results.csv")})
    assert written == ["tiny/edm", *map(str, steps), "tiny/figures", "tiny"]


def test_units_computed_by_parallel_workers_are_logged_each_as_its_run(tmp_path, monkeypatch):
    """--jobs 2: each forked worker logs its unit (MLflow's experiment made by one of them)."""
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, BASE)
    logs = ["--log", "jsonl:lines", "--log", "mlflow:ml"]
    assert main(["run", str(path), "--out", "o", "--no-progress", "--jobs", "2", *logs]) == 0
    rows = read_csv(tmp_path / "o" / "results.csv")
    client = readers.mlflow_client(tmp_path / "ml")
    experiment = client.get_experiment_by_name("tiny").experiment_id
    runs = {r.info.run_name: r for r in client.search_runs([experiment])}
    assert set(runs) == {"tiny/ed", "tiny/edm", "tiny/figures"}
    for unit in ("ed", "edm"):
        steps = scalar_steps(read_jsonl(tmp_path / "lines" / "tiny" / f"{unit}.jsonl"))
        assert sorted(steps) == sorted({r["step"] for r in rows if r["algorithm"] == unit})
        history = client.get_metric_history(runs[f"tiny/{unit}"].info.run_id, "rounds")
        assert [m.step for m in history] == sorted(steps)


@pytest.mark.slow  # two processes
def test_a_sweep_under_torch_distributed_is_logged_once_by_rank_0(tmp_path):
    """Two agents of a training sweep, one per process: rank 0 logs the rows it reports
    (the agents' means), once, and prints its progress as lines."""
    import subprocess

    from tests.experiments.test_spec import NEURAL

    text = NEURAL.replace("agents = 4", "agents = 2").replace("epochs = 3", "epochs = 2")
    path = write(tmp_path, text.replace("milestones = [2]", "milestones = [1]"))
    command = [sys.executable, "-m", "decentopt", "launch", "-n", "2", "-m", "decentopt"]
    command += ["run", str(path), "--out", "o", "--log", "jsonl:lines", "--log-every", "30"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # rank 0's progress: a line every 30 steps and at the last, with the pace and time left
    for unit in ("ed", "edm"):
        progress = [line for line in proc.stdout.splitlines() if line.startswith(f"{unit}: step")]
        total = int(progress[-1].split("/")[1].split()[0])
        steps = [int(line.split()[2].split("/")[0]) for line in progress]
        assert steps == [*range(30, total, 30), total]
        assert all("steps/s" in line and " left" in line for line in progress[:-1])
    rows = read_csv(tmp_path / "o" / "results.csv")
    files = sorted(str(p.relative_to(tmp_path / "lines")) for p in (tmp_path / "lines").rglob("*"))
    units = ["tiny-train/ed-run0.jsonl", "tiny-train/edm-run0.jsonl"]
    assert files == ["tiny-train", *units, "tiny-train/figures.jsonl"]
    for unit in ("ed", "edm"):
        lines = read_jsonl(tmp_path / "lines" / "tiny-train" / f"{unit}-run0.jsonl")
        assert [e["event"] for e in lines].count("start") == 1  # one writer
        steps = scalar_steps(lines)
        mine = [r for r in rows if r["algorithm"] == unit]
        assert sorted(steps) == [r["step"] for r in mine]
        for r in mine:
            assert steps[r["step"]]["train_loss"] == r["train_loss"]
            assert steps[r["step"]]["test_acc"] == r["test_acc"]
            assert steps[r["step"]]["consensus"] == r["consensus"]


def test_a_studys_cases_of_one_specification_are_runs_of_their_own():
    """The graphs study runs one specification once per (n, graph) under
    OUT/NAME/n16/ring: its units' runs are named after the case, so none overwrites
    another of its group; a plain sweep's units keep their own names."""
    from decentopt.integrations.loggers import _unit_name

    assert _unit_name("tiny", Path("results/tiny/runs/edm")) == "edm"
    assert _unit_name("tiny", Path("o/runs/edm-run0")) == "edm-run0"
    case = Path("out/topologies_quadratic/n16/one_peer_hypercube/runs/edm")
    assert _unit_name("topologies_quadratic", case) == "n16/one_peer_hypercube/edm"


def test_a_sweep_under_a_time_model_logs_each_rows_simulated_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    timing = "[timing]\ncompute = 0.01\nslow = [0]\nfactor = 4.0\n[topology]"
    path = write(tmp_path, BASE.replace("[topology]", timing))
    args = ["--out", "o", "--no-progress", "--jobs", "1", "--only", "edm", "--log", "jsonl:l"]
    assert main(["run", str(path), *args]) == 0
    steps = scalar_steps(read_jsonl(tmp_path / "l" / "tiny" / "edm.jsonl"))
    rows = read_csv(tmp_path / "o" / "results.csv")
    assert {r["step"]: r["sim_time"] for r in rows} == {s: v["sim_time"] for s, v in steps.items()}


def test_loggers_given_to_a_run_unnamed_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"log no run yet: name one with .*\.bind\(NAME\)$"):
        edm_run(loggers.make([f"jsonl:{tmp_path}"]))


def test_a_finished_wandb_run_leaves_the_process_exit_hooks_as_it_found_them(tmp_path, monkeypatch):
    """wandb.init replaces sys.exit and sys.excepthook; after finish() the process's own are
    back, so that sys.exit() still exits with code None for whatever runs next."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    before = (sys.exit, sys.excepthook)
    logger = loggers.make(["wandb:hooks"]).bind("edm", "hooks")
    edm_run(logger)
    assert (sys.exit, sys.excepthook) == before
    with pytest.raises(SystemExit) as exited:
        sys.exit()
    assert exited.value.code is None
