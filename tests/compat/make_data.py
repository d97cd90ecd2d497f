"""Writes the files of ``tests/compat/data``: what earlier versions wrote, kept so that
every later version is tested to read them (``tests/compat/test_compat.py``).

Run once, with the version whose files they are (these: 0.2.0 at commit 710b376,
before the one method type), from the repository root:

    PYTHONPATH=src python tests/compat/make_data.py

It writes, for methods of each kind of state (exact mixing, CHOCO's public copies,
push-sum weights, delayed values):

* ``checkpoints/NAME/``: the driver's checkpoint of a run stopped at step 10 of 20, and
  ``final.pt``, the state that run reaches at step 20 when it is not stopped;
* ``optimizer/NAME.pt``: a :class:`~decentopt.distributed.DecentralizedOptimizer`'s
  ``state_dict`` after 3 steps, the model then, and the model 2 steps later;
* ``store/``: the result folder of ``decentopt run store.toml`` (rows, meta, results).
"""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path

import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.distributed import DecentralizedOptimizer
from decentopt.driver import RunOptions, run_loop
from decentopt.plan import Plan

HERE = Path(__file__).parent
DATA = HERE / "data"
ITERATIONS, STOP = 20, 10

#: name -> (method, its keywords, graph): one of each kind of state.
RUNS = {
    "edm": ("edm", {"lr": 0.05, "beta": 0.9}, "ring"),
    "choco_edm": ("choco_edm", {"lr": 0.05, "compression": "top_k(0.5)", "gamma": 0.4}, "ring"),
    "sgp": ("sgp", {"lr": 0.05}, "directed_exponential"),
    "dmsgd_delayed": ("dmsgd", {"lr": 0.05, "gossip": "delayed(2)"}, "ring"),
    "dsgt_rounds": ("dsgt", {"lr": 0.05, "gossip": "multi_round(2)"}, "ring"),
    "osgp": ("osgp", {"lr": 0.05, "tau": 1}, "directed_exponential"),
}


def problem() -> dopt.problems.Quadratic:
    return dopt.problems.Quadratic.paper(n=4, d=3, p=5, c=1.0, sigma2=0.05, repetitions=2, seed=0)


def run(name: str, folder: Path | None, stop: int | None) -> dopt.driver.Result:
    method, kwargs, graph = RUNS[name]
    alg = dopt.algorithms.make(method, **kwargs)
    comm = SimulatedCommunicator(dopt.topology.make(graph, 4))
    plan = Plan(ITERATIONS, (0, STOP, ITERATIONS))
    options = RunOptions(
        seed=3,
        path="step",
        checkpoint_dir=folder,
        checkpoint_every=STOP,
        stop_after=stop,
        log=lambda _: None,
    )
    return run_loop(alg, problem(), comm, plan, options)


def model_and_data() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    return model, torch.randn(32, 4), torch.randint(0, 2, (32,))


def train(opt: torch.optim.Optimizer, model: torch.nn.Module, x, y, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


#: name -> (method, keywords) of the optimizer's state_dicts.
OPTIMIZERS = {
    "edm": ("edm", {"lr": 0.1, "beta": 0.5}),
    "dsgt_hb": ("dsgt_hb", {"lr": 0.1, "beta": 0.5}),
    "choco_edm": ("choco_edm", {"lr": 0.1, "compression": "top_k(0.5)", "gamma": 0.4}),
    "sgp": ("sgp", {"lr": 0.1}),
}


def optimizer(name: str, model: torch.nn.Module) -> DecentralizedOptimizer:
    method, kwargs = OPTIMIZERS[name]
    comm = SimulatedCommunicator(dopt.topology.complete(1))
    return DecentralizedOptimizer(model.parameters(), method, comm, **kwargs)


def main() -> None:
    torch.set_default_dtype(torch.float64)  # as the tests run (tests/conftest.py)
    shutil.rmtree(DATA, ignore_errors=True)
    for name in RUNS:
        folder = DATA / "checkpoints" / name
        run(name, folder, STOP)
        final = run(name, None, None).final_state
        torch.save(dict(final._asdict()), folder / "final.pt")
    (DATA / "optimizer").mkdir(parents=True)
    for name in OPTIMIZERS:
        model, x, y = model_and_data()
        opt = optimizer(name, model)
        train(opt, model, x, y, 3)
        # copies: the state_dicts hold the live tensors, which the next steps change
        saved = {"model": copy.deepcopy(model.state_dict())}
        saved["optimizer"] = copy.deepcopy(opt.state_dict())
        train(opt, model, x, y, 2)
        saved["after"] = model.state_dict()
        torch.save(saved, DATA / "optimizer" / f"{name}.pt")
    from decentopt.cli import main as cli

    code = cli(["run", str(HERE / "store.toml"), "--out", str(DATA / "store"), "--no-progress"])
    sys.exit(code)


if __name__ == "__main__":
    main()
