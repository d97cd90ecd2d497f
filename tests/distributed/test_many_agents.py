"""`decentopt run` with several agents per process, under `decentopt launch`."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from decentopt.driver import RunOptions
from decentopt.driver.checkpointer import Checkpointer
from decentopt.results import read_csv
from tests.experiments.test_spec import NEURAL

#: 16 agents, one epoch of ED and EDM (the loop backend: each agent's gradient alone)
SIXTEEN = (
    NEURAL.replace('name = "tiny-train"', 'name = "sixteen"')
    .replace("agents = 4", "agents = 16")
    .replace("batch_size = 16", "batch_size = 8")
    .replace("epochs = 3", "epochs = 2")
    .replace("milestones = [2]\n", "")
    .replace("runs = 1\n", "runs = 1\ntimeout = 60\n")
)
#: columns that are timings (differ from run to run)
TIMING = {"grad_seconds", "other_seconds", "wall_seconds", "model_time"}


class _Ranks:
    """``comm.mean`` of 4 ranks of 4 agents each that all hold the same rows."""

    def mean(self, z: torch.Tensor) -> torch.Tensor:
        return z.sum(0, keepdim=True) * 4 / 16


def test_ranks_of_several_agents_agree_on_a_checkpoint(tmp_path):
    """Every rank's flag true is a share of 1 whatever the agents per rank (the mean over
    agents of one row per rank was 1/4 here: no checkpoint was ever resumed)."""
    checkpointer = Checkpointer(tmp_path, _Ranks(), period=None)  # type: ignore[arg-type]
    assert checkpointer._share(True) == 1.0 and checkpointer._share(False) == 0.0


@pytest.fixture
def four_ranks(monkeypatch):
    """Rank 0 of 4 as the runner sees it (torchrun's group is never joined: the checks
    below refuse before any communicator is built)."""
    from decentopt.distributed.runtime import Job
    from decentopt.experiments import units

    monkeypatch.setattr(units.runtime, "job", lambda timeout=0: Job(0, 4))


@pytest.mark.parametrize(
    "flags,env,said",
    [
        (["--set", "agents=6"], {}, "6 agents on 4 processes: every process holds as many"),
        (["--executor", "dask"], {}, "--executor dask under torchrun: its 4 processes"),
        ([], {"DECENTOPT_PROCS_PER_AGENT": "2"}, "--procs-per-agent is for training scripts"),
    ],
)
def test_what_a_sweep_under_torchrun_cannot_do_is_one_line(
    tmp_path, capsys, monkeypatch, four_ranks, flags, env, said
):
    from decentopt.cli import main

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = tmp_path / "sixteen.toml"
    config.write_text(SIXTEEN)
    assert main(["run", str(config), "--out", str(tmp_path / "o"), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err, err
    assert not (tmp_path / "o").exists()


def test_a_sweep_gives_each_rank_its_agents(tmp_path, monkeypatch, four_ranks):
    """Rank 2 of 4 builds agents 8-11 of the 16: their data split and their ids."""
    from decentopt.distributed.runtime import Job
    from decentopt.experiments import load_spec, units

    config = tmp_path / "sixteen.toml"
    config.write_text(SIXTEEN)
    spec = load_spec(config)
    monkeypatch.setattr(units.runtime, "job", lambda timeout=0: Job(2, 4))
    mine = units.Units(spec, RunOptions(log=lambda _: None))
    problem = mine.problem_for((0,))
    whole = spec.build_problem((0,))
    assert mine.mine() == range(8, 12) and problem.agent_ids == (8, 9, 10, 11)
    assert problem.n == 4 and whole.n == 16
    for a in range(4):
        assert (problem.sampler.indices[a] == whole.sampler.indices[8 + a]).all()


def _run(args: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "decentopt", *args, "--no-progress"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # 4 processes, then the simulator, each a fresh interpreter
def test_sixteen_agents_on_four_processes_write_the_simulators_rows(tmp_path):
    config = tmp_path / "sixteen.toml"
    config.write_text(SIXTEEN)
    launched = _run(
        ["launch", "-n", "4", "-m", "decentopt", "run", str(config), "--out", str(tmp_path / "d")]
    )
    assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-3000:]
    assert "2 unit(s) computed" in launched.stdout
    assert list((tmp_path / "d" / "runs" / "edm-run0").glob("step-*/rank3.pt"))
    assert not list((tmp_path / "d" / "runs").glob("*/lease"))  # the ranks compute together
    alone = _run(["run", str(config), "--out", str(tmp_path / "s"), "--jobs", "1"])
    assert alone.returncode == 0, alone.stderr[-3000:]
    dist, sim = (read_csv(tmp_path / k / "results.csv") for k in ("d", "s"))
    assert len(dist) == len(sim) == 4  # ed and edm, 2 epochs
    for d, s in zip(dist, sim, strict=True):
        for key, value in s.items():
            if key in TIMING:
                continue
            if isinstance(value, float):
                assert d[key] == pytest.approx(value, rel=1e-5, abs=1e-7), (key, d, s)
            else:
                assert d[key] == value, key
    wrong = _run(
        ["launch", "-n", "3", "-m", "decentopt", "run", str(config), "--out", str(tmp_path / "w")]
    )
    said = (wrong.stderr + wrong.stdout).strip().splitlines()
    errors = [line for line in said if "16 agents on 3 processes" in line]
    assert wrong.returncode != 0 and errors, said[-5:]
    assert "agents must be a multiple of the processes" in errors[0]
    assert "--set agents=18" in errors[0] and "1, 2, 4, 8, 16" in errors[0]
