from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from decentopt.cli import main


def test_topology_command(capsys):
    assert main(["topology", "ring", "--n", "32", "--L", "2", "--beta", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "0.990393" in out and "holds" in out
    values = {line.split("  ")[0].strip(): line.rsplit(None, 1)[-1] for line in out.splitlines()}
    lam = 0.5 + 0.5 * np.cos(2 * np.pi / 32)
    # Theorem 1: min((1 - sqrt(lam)) / (4 L), (1 - beta) / (4 L)) with L = 2
    theorem1 = next(v for k, v in values.items() if k.startswith("max alpha, Theorem 1"))
    assert float(theorem1) == pytest.approx((1 - lam**0.5) / 8, rel=1e-3)
    # Theorem 2: min((1 - sqrt(lam)) / (10 L), (1 - beta) / (5 L))
    theorem2 = next(v for k, v in values.items() if k.startswith("max alpha, Theorem 2"))
    assert float(theorem2) == pytest.approx((1 - lam**0.5) / 20, rel=1e-3)


def test_topology_command_reports_a_violation(tmp_path, capsys):
    path = tmp_path / "w.npy"
    np.save(path, np.array([[0.0, 1.0], [1.0, 0.0]]))
    assert main(["topology", "matrix", "--matrix", str(path)]) == 1
    assert "Assumption 1(1) fails" in capsys.readouterr().out
    assert main(["topology", "ring"]) == 2
    assert "--n" in capsys.readouterr().err


def test_compare_is_the_compare_preset_with_overrides(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "--quick", "--set", "agents=8", "--set", "iterations=50", "--set", "runs=2"]
    args += ["--out", str(out), "--no-progress"]
    assert main([*args, "--only", "ed,edm"]) == 0
    text = capsys.readouterr().out
    assert "| EDM |" in text and "DSGD" not in text and (out / "compare.png").is_file()
    assert main([*args, "--only", "adam"]) == 2
    assert "unknown algorithm 'adam'" in capsys.readouterr().err
    assert main([*args, "--only", "edm", "--set", 'topology.name="exponential"']) == 0
    assert "exponential(8)" in capsys.readouterr().out


def test_version_and_help_list_every_target(capsys):
    import decentopt

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"decentopt {decentopt.__version__}"
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert all(t in text for t in ("fig1", "fig2", "fig3", "fig4", "table1", "methods"))


def test_compare_on_erdos_renyi_and_did_you_mean(tmp_path, capsys):
    args = ["compare", "--set", "agents=8", "--set", "iterations=20", "--set", "runs=1"]
    args += ["--out", str(tmp_path), "--only", "edm", "--set", 'topology.name="erdos_renyi"']
    assert main(args) == 2
    assert "[topology]: erdos_renyi needs 'p'" in capsys.readouterr().err
    assert main([*args, "--set", "topology.p=0.5"]) == 0
    assert main([*args[:-4], "--only", "edmm"]) == 2
    assert "did you mean 'edm'?" in capsys.readouterr().err


def test_ctrl_c_prints_a_message_not_a_traceback(monkeypatch, capsys):
    import decentopt.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "compare", (*cli.COMMANDS["compare"][:2], interrupted))
    assert main(["compare"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err


def test_file_system_faults_are_one_line_errors(tmp_path, capsys):
    from tests.experiments.test_spec import BASE, write

    cfg = str(write(tmp_path, BASE))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["run", cfg, "--out", str(blocker / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "a-file" in err and "writable folder" in err
    assert "Traceback" not in err


def test_an_output_file_that_is_a_folder_is_a_one_line_error_and_keeps_the_work(tmp_path, capsys):
    from tests.experiments.test_spec import BASE, write

    cfg = str(write(tmp_path, BASE))
    out = tmp_path / "out"
    (out / "results.csv").mkdir(parents=True)  # where the table must go, a folder
    assert main(["run", cfg, "--out", str(out), "--no-progress", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "results.csv" in err and "Traceback" not in err
    assert "Units finished before are saved" in err
    assert len(list((out / "runs").glob("*/meta.json"))) == 2  # both units were kept
    (out / "results.csv").rmdir()
    assert main(["run", cfg, "--out", str(out), "--no-progress", "--jobs", "1"]) == 0
    assert "0 unit(s) computed, 2 resumed" in capsys.readouterr().out


def test_every_topology_builder_parameter_is_an_option(capsys):
    """spanning_tree --graph ring spans the ring (not silently a torus); every parameter
    of every registered builder has its option; one the builder lacks is refused."""
    import inspect

    from decentopt import topology
    from decentopt.cli import TOPOLOGY_OPTIONS

    for name, builder in topology.REGISTRY.items():
        for key in list(inspect.signature(builder).parameters)[1:]:
            assert key in TOPOLOGY_OPTIONS, (name, key)
    assert main(["topology", "spanning_tree", "--n", "16", "--graph", "ring", "--root", "3"]) == 0
    out = capsys.readouterr().out
    assert "ring" in out and "torus" not in out
    assert main(["topology", "torus", "--n", "12", "--cols", "4", "--lazy", "yes"]) == 0
    assert "lazy" in capsys.readouterr().out
    assert main(["topology", "ring", "--n", "8", "--seed", "3"]) == 2
    assert "ring takes no --seed; its options: --weights, --lazy" in capsys.readouterr().err


def test_a_label_too_long_for_a_file_name_still_runs(tmp_path, capsys):
    from tests.experiments.test_spec import BASE, write

    long = "edm_" + "x" * 300
    text = BASE.replace("[algorithms.edm]", f'[algorithms.{long}]\nmethod = "edm"')
    cfg = str(write(tmp_path, text))
    assert main(["run", cfg, "--out", str(tmp_path / "out"), "--no-progress", "--jobs", "1"]) == 0
    capsys.readouterr()
    assert all(len(p.name) < 256 for p in (tmp_path / "out" / "runs").iterdir())


@pytest.mark.parametrize(
    "code, cause",
    [
        (errno.EISDIR, "a folder is where a file must be written"),
        (errno.ENAMETOOLONG, "longer than the file system allows"),
        (errno.EACCES, "no permission"),
        (errno.ENOSPC, "the disk is full"),
    ],
)
def test_a_file_system_refusal_names_its_cause(monkeypatch, capsys, code, cause):
    import decentopt.cli as cli

    def refused(args):
        raise OSError(code, os.strerror(code), "out/summary.md")

    monkeypatch.setitem(cli.COMMANDS, "compare", (*cli.COMMANDS["compare"][:2], refused))
    assert main(["compare"]) == 2
    err = capsys.readouterr().err
    assert cause in err and "out/summary.md" in err and len(err.strip().splitlines()) == 1
    assert (code == errno.ENOSPC) == ("free space" in err)


def test_a_summary_that_is_a_folder_is_named_as_such(tmp_path, capsys):
    from tests.experiments.test_spec import BASE, write

    cfg = str(write(tmp_path, BASE))
    out = tmp_path / "out"
    (out / "summary.md").mkdir(parents=True)
    assert main(["run", cfg, "--out", str(out), "--no-progress", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "summary.md" in err and "a folder is where a file must be written" in err
    assert ".tmp" not in err and "free space" not in err


@pytest.mark.parametrize(
    "env, named",
    [
        ({"RANK": None, "MASTER_ADDR": None, "MASTER_PORT": None}, "missing RANK, MASTER_ADDR"),
        ({"RANK": "5"}, "RANK=5 with WORLD_SIZE=2"),
        ({"RANK": "-1"}, "RANK=-1 with WORLD_SIZE=2"),
        ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' is not a whole number"),
        ({"RANK": "x"}, "RANK='x' is not a whole number"),
        ({"MASTER_PORT": "99999"}, "MASTER_PORT=99999 is not a port"),
        ({"MASTER_ADDR": "no-such-host.invalid"}, "MASTER_ADDR='no-such-host.invalid'"),
    ],
)
def test_a_wrong_distributed_environment_is_one_line_naming_the_variable(
    tmp_path, monkeypatch, capsys, env, named
):
    """A rank started by hand with a wrong environment (None: unset): one line naming the
    variable, at once, not a traceback or a wait for the timeout."""
    import time

    from tests.experiments.test_spec import BASE, write

    full = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}
    for key, value in (full | env).items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    cfg = str(write(tmp_path, BASE))
    start = time.monotonic()
    assert main(["run", cfg, "--out", str(tmp_path / "out"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err and len(err.strip().splitlines()) == 1
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("deep", ["[" * 30000 + "]" * 30000, "{a = " * 30000 + "1" + "}" * 30000])
def test_a_specification_nested_thousands_deep_is_one_line(tmp_path, capsys, deep):
    path = tmp_path / "deep.toml"
    path.write_text(f'name = "deep"\nproblem = "quadratic"\nagents = 4\nv = {deep}\n')
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "values are nested too deeply" in err and str(path) in err


def test_a_time_model_naming_a_missing_agent_is_refused_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "o"
    args = ["compare", "--quick", "--set", "agents=8", "--set", "timing.slow=[99]"]
    assert main([*args, "--out", str(out), "--no-progress", "--jobs", "1"]) == 2
    captured = capsys.readouterr()
    assert "slow agent 99 does not exist among agents = 8" in captured.err
    assert captured.out == "" and not out.exists()  # no unit ran, nothing was written


NEURAL_WITHOUT_PHI_AND_BATCH = """
name = "train"
problem = "neural"
agents = 2
[topology]
name = "ring"
[problem_params]
dataset = "digits"
model = "small_cnn"
epochs = 2
[algorithms.edm]
"""


def test_every_missing_key_of_a_training_run_is_named_before_any_process_starts(
    tmp_path, capsys, monkeypatch
):
    path = tmp_path / "train.toml"
    path.write_text(NEURAL_WITHOUT_PHI_AND_BATCH)
    started = []
    monkeypatch.setattr("decentopt.cli.launch", lambda *a, **k: started.append(a) or 0)
    assert main(["launch", "-n", "2", "-m", "decentopt", "run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing required keys 'phi', 'batch_size'" in err
    assert started == []  # refused by the launcher itself
    assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 2  # and without it
    assert "missing required keys 'phi', 'batch_size'" in capsys.readouterr().err
    fixed = NEURAL_WITHOUT_PHI_AND_BATCH.replace(
        "epochs = 2", "epochs = 2\nphi = 0.5\nbatch_size = 8"
    )
    path.write_text(fixed)
    assert main(["launch", "-n", "2", "-m", "decentopt", "run", str(path)]) == 0
    assert len(started) == 1  # a valid specification is launched
    # what the launcher does not read (another command, arguments the ranks refuse) goes on
    assert main(["launch", "-n", "2", "-m", "decentopt", "methods", "edm"]) == 0
    assert main(["launch", "-n", "2", "-m", "decentopt", "run", "--no-such-flag"]) == 0
    assert len(started) == 3


@pytest.mark.parametrize(
    ("launcher", "flag"),
    [("decentopt", "decentopt launch -n 6"), ("torchrun", "torchrun --nproc-per-node 6")],
)
def test_the_world_size_error_names_the_flag_of_the_launcher_in_use(
    tmp_path, capsys, monkeypatch, launcher, flag
):
    from decentopt.distributed.runtime import Job

    if launcher == "decentopt":
        monkeypatch.setenv("DECENTOPT_ATTEMPT", "0")  # what decentopt launch sets
    else:
        monkeypatch.delenv("DECENTOPT_ATTEMPT", raising=False)
    monkeypatch.setattr("decentopt.distributed.runtime.job", lambda timeout: Job(0, 4))
    args = ["compare", "--quick", "--set", "agents=6", "--out", str(tmp_path / "o")]
    assert main([*args, "--no-progress", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "6 agents on 4 processes" in err and f"start it with {flag} (processes that" in err
    other = "--nproc-per-node" if launcher == "decentopt" else "launch -n"
    assert other not in err


def test_edm_refuses_push_sum_without_speaking_of_a_directed_graph_it_was_not_given(capsys):
    assert main(["compare", "--set", 'algorithms.edm.gossip="push_sum"', "--only", "edm"]) == 2
    err = capsys.readouterr().err
    assert "edm's correction needs a symmetric W" in err and "leave gossip out" in err
    assert "push-sum over a directed graph does not give" not in err


def test_the_version_is_the_release_the_changelog_describes(capsys):
    import re
    from pathlib import Path

    import decentopt

    changes = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text()
    newest = re.search(r"^## (\d+\.\d+\.\d+)", changes, re.M)
    assert newest is not None and decentopt.__version__ == newest.group(1)
    with pytest.raises(AttributeError, match=r"renamed decentopt\.distributed in 0\.2 and removed"):
        decentopt.dist  # noqa: B018  # announced to go in 0.3
