"""Independent runs of one neural problem stepped together as one ``(n, R, P)`` state."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from decentopt.problems.neural.base import Batch
from decentopt.problems.neural.problem import NeuralProblem

if TYPE_CHECKING:
    from decentopt.communicator import Communicator

__all__ = ["BatchedRuns"]


class BatchedRuns:
    """Independent runs of one neural problem stepped together: the state is ``(n, R, P)``.

    Run ``r`` has its own Dirichlet split, initialisation, sampler, augmentation and
    dropout generators and metrics (column ``r``), exactly as when it runs alone; the
    gradients of all ``n * R`` replicas are one backend over ``n * R`` replicas (one
    batched call with vmap and grouped). With the loop and grouped backends every
    replica draws its dropout masks from its own generator, so every run's rows equal
    those of the run alone; vmap draws the masks of all replicas together from
    torch's generator (statistically the same, not the same numbers).

    The augmentation generator of run ``r`` is seeded ``s + r``, where ``s`` is the
    seed of the generator the driver passes: the seed run ``r`` gets alone.
    """

    def __init__(self, runs: list[NeuralProblem]) -> None:
        if not runs or len({(r.n, r.dim, r.backend) for r in runs}) != 1:
            raise ValueError(
                "BatchedRuns needs runs of the same model, backend and number of agents"
            )
        self.runs = runs
        first = runs[0]
        self.n = first.n
        self.dim = first.dim
        self.dtype = first.dtype
        self.device = first.device
        self.x_star = None
        self.repetitions = len(runs)
        self.sampler = first.sampler  # every run's epoch has the same length (N / n samples)
        self.backend = first.backend
        self.engine = first.make_engine(self.n * self.repetitions)
        self._generators: list[torch.Generator] | None = None

    def initial_point(self) -> torch.Tensor:
        return torch.stack([r.initial_point() for r in self.runs], dim=1)

    def _streams(self, generator: torch.Generator) -> list[torch.Generator]:
        if self._generators is None:
            base = generator.initial_seed()
            self._generators = [
                torch.Generator().manual_seed(base + r) for r in range(len(self.runs))
            ]
        return self._generators

    def _replica_dropout(self, streams: list[torch.Generator]) -> list[torch.Generator]:
        """Every replica's generator, in the order of ``x.reshape(n * R, P)``."""
        each = [run.dropout_generators(g) for run, g in zip(self.runs, streams, strict=True)]
        return [each[r][i] for i in range(self.n) for r in range(len(self.runs))]

    def gradient_and_loss(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients ``(n, R, P)`` and mini-batch losses ``(n, R)`` of every run."""
        streams = self._streams(generator or torch.Generator().manual_seed(0))
        batches = [run.batch(g) for run, g in zip(self.runs, streams, strict=True)]
        images = torch.stack([b[0] for b in batches], dim=1).flatten(0, 1)
        labels = torch.stack([b[1] for b in batches], dim=1).flatten(0, 1)
        flat = x.reshape(self.n * len(self.runs), self.dim)
        batch = Batch(images, labels, self._replica_dropout(streams))
        grads, losses = self.engine.gradients(flat, batch)
        grads = grads.view(x.shape)
        if self.runs[0].weight_decay:
            grads.add_(x, alpha=self.runs[0].weight_decay)
        return grads, losses.view(self.n, len(self.runs))

    def metrics(self, x: torch.Tensor, comm: Communicator | None = None) -> dict[str, Any]:
        """Every run's metrics, one value per run (column); all agents of all runs are
        evaluated in one call per test batch."""
        R = len(self.runs)
        loss, acc = self.runs[0].evaluate_replicas(self.engine, x.reshape(self.n * R, self.dim))
        loss, acc = loss.reshape(self.n, R), acc.reshape(self.n, R)
        buffers = self.engine.buffers()
        each = [
            run.metrics(
                x[:, r], comm, (loss[:, r], acc[:, r]), [buffers[i * R + r] for i in range(self.n)]
            )
            for r, run in enumerate(self.runs)
        ]
        return {k: np.array([m[k] for m in each]) for k in each[0]}

    def state_dict(self) -> dict[str, Any]:
        return {
            "runs": [r.state_dict() for r in self.runs],
            "generators": [g.get_state() for g in self._generators or []],
            "buffers": self.engine.buffers(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for run, saved in zip(self.runs, state["runs"], strict=True):
            run.load_state_dict(saved)
        first = self.runs[0]
        if first.backend != self.backend:  # the runs resumed another backend
            self.backend = first.backend
            self.engine = first.make_engine(self.n * len(self.runs))
        if state["generators"]:
            self._generators = [torch.Generator().set_state(g) for g in state["generators"]]
        if state.get("buffers"):
            self.engine.load_buffers(state["buffers"])

    def __repr__(self) -> str:
        return f"BatchedRuns(R={len(self.runs)} x {self.runs[0]!r})"
