from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import decentopt as dopt
from decentopt.data import dirichlet_split
from decentopt.distributed.checkpoint import latest_checkpoint, load_checkpoint
from decentopt.problems.neural import NeuralProblem
from decentopt.training import epoch_schedule, train
from tests.problems.test_neural import tiny_cnn, toy_data


def setup_module() -> None:
    torch.set_default_dtype(torch.float32)


def teardown_module() -> None:
    torch.set_default_dtype(torch.float64)


def test_one_agent_equals_plain_single_model_training(tmp_path):
    """n = 1, W = [[1]]: DSGD is SGD and EDM is (dampened) heavy-ball SGD on one model."""
    data = toy_data()
    for name, beta in (("dsgd", 0.0), ("edm", 0.8)):
        ckpt = tmp_path / name
        problem = NeuralProblem(tiny_cnn(), data, (np.arange(90),), batch_size=10, seed=4)
        hp = {"lr": 0.1} | ({"beta": beta} if beta else {})
        alg = dopt.algorithms.make(name, **hp)
        rows = train(
            alg,
            problem,
            dopt.topology.complete(1),
            epochs=2,
            progress=False,
            log=lambda _: None,
            checkpoint_dir=ckpt,
        ).rows
        trained = load_checkpoint(ckpt, latest_checkpoint(ckpt))["state"]["x"][0]
        # the same mini-batches, drawn by an identical sampler, on a plain model
        model = tiny_cnn()
        sampler = NeuralProblem(tiny_cnn(), data, (np.arange(90),), batch_size=10, seed=4).sampler
        buf = [torch.zeros_like(p) for p in model.parameters()]
        for _ in range(2 * sampler.steps_per_epoch):
            ix = torch.from_numpy(sampler.next()[0])
            loss = F.cross_entropy(model(data.x_train[ix]), data.y_train[ix])
            grads = torch.autograd.grad(loss, list(model.parameters()))
            with torch.no_grad():
                for p, g, b in zip(model.parameters(), grads, buf, strict=True):
                    b.mul_(beta).add_(g, alpha=1 - beta)
                    p.sub_(0.1 * b)
        plain = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        test_loss, _ = problem.evaluate(model)
        assert abs(rows[-1]["test_loss"] - test_loss) < 1e-4
        torch.testing.assert_close(trained, plain, rtol=1e-5, atol=1e-6)
        assert rows[-1]["train_loss"] > 0


def make_problem(seed: int = 0) -> NeuralProblem:
    data = toy_data()
    split = dirichlet_split(data.y_train.numpy(), 4, 0.5, seed=seed, min_share=6)
    model = torch.nn.Sequential(*tiny_cnn(), torch.nn.Dropout(0.3))  # randomness to restore
    return NeuralProblem(model, data, split.indices, batch_size=6, backend="loop", seed=seed)


def test_checkpoint_and_resume_reproduce_the_uninterrupted_run(tmp_path):
    topo = dopt.topology.ring(4)
    problem = make_problem()
    sched = epoch_schedule(0.1, problem.sampler.steps_per_epoch, milestones=(2,), warmup_epochs=1)
    alg = dopt.algorithms.make("edm", lr=sched, beta=0.9)
    quiet = {"progress": False, "log": lambda _: None}
    torch.manual_seed(0)
    full = train(alg, make_problem(), topo, epochs=4, **quiet).rows
    torch.manual_seed(0)
    train(alg, make_problem(), topo, epochs=4, checkpoint_dir=tmp_path, stop_after_epoch=2, **quiet)
    torch.manual_seed(123)  # the resumed process starts with another RNG state
    resumed = train(alg, make_problem(), topo, epochs=4, checkpoint_dir=tmp_path, **quiet).rows
    assert len(resumed) == len(full) == 4
    for a, b in zip(full, resumed, strict=True):
        for key in ("train_loss", "test_loss", "test_acc", "consensus", "lr"):
            assert a[key] == b[key], key
    assert full[0]["lr"] == 0.1 and full[-1]["lr"] == 0.1 * 0.1


def test_training_learns_and_records():
    torch.manual_seed(0)
    problem = make_problem()
    alg = dopt.algorithms.make("edm", lr=0.2, beta=0.9)
    rows = train(
        alg,
        problem,
        dopt.topology.ring(4),
        epochs=15,
        eval_every=5,
        progress=False,
        log=lambda _: None,
    ).rows
    assert [r["epoch"] for r in rows] == [5, 10, 15]
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    assert rows[-1]["test_acc"] > 0.4
    assert {"agent_test_acc", "grad_seconds", "other_seconds"} <= set(rows[0])


def test_batched_runs_give_each_run_the_rows_it_has_alone(tmp_path):
    """`runs_per_batch = 2` with the loop backend: two runs stepped as one (n, 2, P) state
    reproduce, row for row, the runs computed one at a time (dropout included)."""
    from decentopt.experiments import load_spec, run_spec
    from tests.experiments.test_spec import NEURAL, write

    text = NEURAL.replace("runs = 1", "runs = 3").replace("epochs = 3", "epochs = 2")
    text = text.replace("milestones = [2]\n", "").replace("[algorithms.ed]\n", "")
    alone = load_spec(write(tmp_path, text, "alone.toml"))
    together = load_spec(
        write(
            tmp_path,
            text.replace('backend = "loop"', 'backend = "loop"\nruns_per_batch = 2'),
            "b.toml",
        )
    )
    quiet = {"progress": False, "log": lambda _: None}
    rows = [
        run_spec(s, tmp_path / name, **quiet).rows for s, name in ((alone, "a"), (together, "b"))
    ]
    assert rows[1] and len(rows[0]) == len(rows[1]) == 6  # 3 runs x 2 epochs
    units = sorted(p.name for p in (tmp_path / "b" / "runs").iterdir())
    assert units == ["edm-run2", "edm-runs0-1"]  # runs 0 and 1 together, then run 2

    def key(r):
        return (r["run"], r["step"])

    skip = {"grad_seconds", "other_seconds", "wall_seconds"}
    for a, b in zip(sorted(rows[0], key=key), sorted(rows[1], key=key), strict=True):
        for k in a:
            if k not in skip:
                want = b[k] if isinstance(b[k], str) else pytest.approx(b[k], rel=1e-6, abs=1e-9)
                assert a[k] == want, (k, a[k], b[k])
    vmap = load_spec(
        write(
            tmp_path,
            text.replace('backend = "loop"', 'backend = "vmap"\nruns_per_batch = 2'),
            "v.toml",
        )
    )
    got = run_spec(vmap, tmp_path / "v", **quiet).rows
    assert sorted({r["run"] for r in got}) == [0, 1, 2] and all(r["train_loss"] > 0 for r in got)
    fit = load_spec(write(tmp_path, text.replace("runs = 3", "runs = 3\n"), "f.toml"))
    params = dataclasses.replace(fit.params, runs_per_batch=0)
    assert params.run_groups(3, 4) == [(0, 1, 2)]  # a tiny model: every run fits at once


def test_a_topology_of_another_size_is_refused_as_simulate_refuses_it():
    shards = (np.arange(45), np.arange(45, 90))
    problem = NeuralProblem(tiny_cnn(), toy_data(), shards, batch_size=10)
    with pytest.raises(ValueError, match=r"n = 3 agents but the problem has n = 2; build both"):
        train(dopt.algorithms.make("dsgd", lr=0.1), problem, dopt.topology.ring(3), epochs=1)
