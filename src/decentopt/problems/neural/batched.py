"""Independent runs of one neural problem stepped together as one ``(n, R, P)`` state."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from decentopt.problems.neural.problem import NeuralProblem

if TYPE_CHECKING:
    from decentopt.comm.base import Communicator

__all__ = ["BatchedRuns"]


class BatchedRuns:
    """Independent runs of one neural problem stepped together: the state is ``(n, R, P)``.

    Run ``r`` has its own Dirichlet split, initialisation, sampler, augmentation
    generator and metrics (column ``r``), exactly as when it runs alone. With the
    vmap backend the gradients of all ``n * R`` replicas are one batched call;
    their dropout masks are then drawn together (statistically the same, not
    the same numbers as a run alone). With the loop backend each run draws from
    its own random stream, so every run's rows equal those of the run alone.

    The augmentation generator of run ``r`` is seeded ``s + r`` and its dropout
    stream ``d + r``, where ``s`` is the first seed of the generator the driver
    passes and ``d`` torch's initial seed: the seeds the runs get one by one.
    """

    def __init__(self, runs: list[NeuralProblem]) -> None:
        if not runs or len({(r.n, r.dim) for r in runs}) != 1:
            raise ValueError("BatchedRuns needs runs of the same model and number of agents")
        self.runs = runs
        first = runs[0]
        self.n, self.dim, self.dtype, self.device = first.n, first.dim, first.dtype, first.device
        self.x_star = None
        self.repetitions = len(runs)
        self.sampler = first.sampler  # every run's epoch has the same length (N / n samples)
        self.backend = first.backend
        self._generators: list[torch.Generator] | None = None
        self._dropout: list[torch.Tensor] | None = None

    def initial_point(self) -> torch.Tensor:
        return torch.stack([r.initial_point() for r in self.runs], dim=1)

    def _streams(self, generator: torch.Generator) -> None:
        if self._generators is None:
            base = generator.initial_seed()
            self._generators = [
                torch.Generator().manual_seed(base + r) for r in range(len(self.runs))
            ]
            dropout = torch.initial_seed()
            self._dropout = []
            for r in range(len(self.runs)):
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(dropout + r)
                    self._dropout.append(torch.get_rng_state())

    def gradient_and_loss(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients ``(n, R, P)`` and mini-batch losses ``(n, R)`` of every run."""
        self._streams(generator or torch.Generator().manual_seed(0))
        assert self._generators is not None and self._dropout is not None
        if self.backend == "vmap":
            batches = [r._batch(g) for r, g in zip(self.runs, self._generators, strict=True)]
            images = torch.stack([b[0] for b in batches], dim=1).flatten(0, 1)
            labels = torch.stack([b[1] for b in batches], dim=1).flatten(0, 1)
            flat = x.reshape(self.n * len(self.runs), self.dim)
            grads, losses = self.runs[0]._vmap_grads(flat, images, labels)
            grads = grads.view(x.shape)
            if self.runs[0].weight_decay:
                grads.add_(x, alpha=self.runs[0].weight_decay)
            return grads, losses.view(self.n, len(self.runs))
        grads, losses = [], []
        for r, run in enumerate(self.runs):
            with torch.random.fork_rng(devices=[]):  # this run's own dropout stream
                torch.set_rng_state(self._dropout[r])
                g, loss = run.gradient_and_loss(x[:, r], self._generators[r])
                self._dropout[r] = torch.get_rng_state()
            grads.append(g)
            losses.append(loss)
        return torch.stack(grads, dim=1), torch.stack(losses, dim=1)

    def metrics(self, x: torch.Tensor, comm: Communicator | None = None) -> dict[str, Any]:
        """Every run's metrics, one value per run (column)."""
        each = [run.metrics(x[:, r], comm) for r, run in enumerate(self.runs)]
        return {k: np.array([m[k] for m in each]) for k in each[0]}

    def state_dict(self) -> dict[str, Any]:
        return {
            "runs": [r.state_dict() for r in self.runs],
            "generators": [g.get_state() for g in self._generators or []],
            "dropout": list(self._dropout or []),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for run, saved in zip(self.runs, state["runs"], strict=True):
            run.load_state_dict(saved)
        if state["generators"]:
            self._generators = [torch.Generator() for _ in self.runs]
            for g, saved in zip(self._generators, state["generators"], strict=True):
                g.set_state(saved)
            self._dropout = list(state["dropout"])

    def __repr__(self) -> str:
        return f"BatchedRuns(R={len(self.runs)} x {self.runs[0]!r})"
