"""A new problem kind is one file like this one plus one registry line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from decentopt._schema import bounded
from decentopt.cli import main
from decentopt.experiments import kinds
from decentopt.plan import Plan
from decentopt.problems.base import StatelessProblem
from decentopt.results import read_csv


class MeanEstimation(StatelessProblem):
    """f_i(x) = 1/2 ||x - b_i||^2: the optimum of the average is the mean of the b_i."""

    def __init__(self, b: torch.Tensor, noise: float) -> None:
        self.b, self.noise = b, noise
        self.n, self.runs, self.dim = b.shape
        self.dtype = b.dtype
        self.x_star = b.mean(0)

    def initial_point(self) -> torch.Tensor:
        return torch.zeros_like(self.b)

    def gradient(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype)
        return x - self.b + self.noise * noise

    def metrics(self, x: torch.Tensor, comm: Any = None) -> dict[str, torch.Tensor]:
        return {"dist_to_opt": (x - self.x_star).pow(2).sum(-1).mean(0)}


@dataclass(frozen=True)
class MeanSpec:
    panel: ClassVar[str | None] = None
    metrics: ClassVar[tuple[str, ...]] = ("dist_to_opt",)
    batch_runs: ClassVar[bool] = True

    d: int = bounded(3, minimum=1)
    noise: float = bounded(0.0, minimum=0)

    @property
    def deterministic(self) -> bool:
        return self.noise == 0

    def describe(self) -> str:
        return f"mean estimation (d = {self.d})"

    def check(self, iterations: int | None) -> None:
        if iterations is None:
            raise ValueError("needs 'iterations'")

    def build(self, *, agents: int, runs: int, seed: int, rank: int | None) -> MeanEstimation:
        gen = torch.Generator().manual_seed(seed)
        return MeanEstimation(
            torch.randn(agents, runs, self.d, generator=gen, dtype=torch.float64), self.noise
        )

    def plan(self, problem: Any, iterations: int | None, points: int) -> Plan:
        assert iterations is not None
        return Plan(iterations, tuple(range(0, iterations + 1, 10)))

    def step_size(self, lr: Any, problem: Any) -> Any:
        return lr

    def columns(self, problem: MeanEstimation) -> list[dict[str, Any]]:
        return [{"run": r} for r in range(problem.runs)]

    def memory_bytes(self, *, agents: int, runs: int) -> dict[str, float]:
        return {"targets, iterates and state": 6 * 8 * agents * runs * self.d}

    def iterate_bytes(self, *, agents: int, runs: int) -> float:
        return 8 * agents * runs * self.d


TOY = """
problem = "mean"
agents = 8
runs = 3
iterations = 300
[topology]
name = "ring"
[problem_params]
d = 4
[algorithms.edm]
lr = 0.5
beta = 0.5
[algorithms.dsgd]
lr = 0.5
"""


def test_a_registered_kind_runs_through_decentopt_run(tmp_path, capsys):
    kinds.register_kind("mean", MeanSpec)
    try:
        path = tmp_path / "toy.toml"
        path.write_text(TOY)
        assert main(["run", str(path), "--out", str(tmp_path / "o"), "--no-progress"]) == 0
        assert "mean estimation (d = 4)" in (tmp_path / "o" / "summary.md").read_text()
        assert "| EDM |" in capsys.readouterr().out
        rows = read_csv(tmp_path / "o" / "results.csv")
        last = {r["algorithm"]: r["dist_to_opt"] for r in rows if r["step"] == 300}
        # exact gradients: EDM reaches the optimum exactly, DSGD stays at its bias
        assert last["edm"] < 1e-20 < 1e-4 < last["dsgd"]
        path.write_text(TOY.replace("d = 4", "d = 4\nspread = 2"))
        assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
        assert "[problem_params]: unknown key 'spread'" in capsys.readouterr().err
    finally:
        kinds.KINDS.pop("mean")
