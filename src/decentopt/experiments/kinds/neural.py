"""The ``neural`` kind: a model trained by every agent on its Dirichlet share (Figures 3-4)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from decentopt._checks import unknown_name
from decentopt._schema import bounded
from decentopt.data import augment_cifar, dirichlet_split, load_cifar10, load_digits
from decentopt.data.datasets import Dataset
from decentopt.distributed.runtime import device_for_rank
from decentopt.models import MODELS, make_model
from decentopt.perf import available_memory
from decentopt.plan import Plan
from decentopt.problems.neural import BatchedRuns, NeuralProblem
from decentopt.schedules import epoch_schedule

__all__ = ["NeuralSpec"]


@functools.lru_cache(maxsize=2)
def _dataset(name: str, folder: str, dtype: str) -> Dataset:
    data = load_cifar10(folder) if name == "cifar10" else load_digits()
    cast = getattr(torch, dtype)
    return replace(data, x_train=data.x_train.to(cast), x_test=data.x_test.to(cast))


@dataclass(frozen=True)
class NeuralSpec:
    """``problem = "neural"``: a model trained by every agent on its Dirichlet share.

    One unit of work per (algorithm, run); a run is sized in epochs, the step
    size decays by ``gamma`` at the ``milestones`` epochs after a linear warm-up,
    and metrics are evaluated every ``eval_every`` epochs.
    """

    panel: ClassVar[str | None] = None
    #: mini-batches, augmentation and dropout make every run random
    deterministic: ClassVar[bool] = False
    batch_runs: ClassVar[bool] = False  # units: run_groups (runs_per_batch)
    metrics: ClassVar[tuple[str, ...]] = (
        "test_acc",
        "test_loss",
        "train_loss",
        "agent_test_acc",
        "agent_test_loss",
        "consensus",
    )

    dataset: Literal["cifar10", "digits"]
    model: str
    phi: float = bounded(above=0)
    batch_size: int = bounded(minimum=1)
    epochs: int = bounded(minimum=1)
    data_dir: str = ""
    min_share: int | None = bounded(None, minimum=0)
    milestones: tuple[int, ...] = ()
    gamma: float = bounded(0.1, above=0)
    warmup_epochs: int = bounded(0, minimum=0)
    weight_decay: float = bounded(0.0, minimum=0)
    augment: bool = False
    eval_every: int = bounded(1, minimum=1)
    device: str = "cpu"
    backend: Literal["auto", "loop", "vmap", "grouped"] = "auto"
    dtype: Literal["float32", "float64"] = "float32"
    precision: Literal["auto", "float32", "bf16"] = "auto"
    channels_last: bool = False
    compile: bool = False
    #: runs stepped together as one ``(n, R, P)`` state (:class:`BatchedRuns`): 1 (each
    #: run alone, the default), k, or 0 for as many as fit in the available memory
    runs_per_batch: int = bounded(1, minimum=0)

    def describe(self) -> str:
        model = {"vgg11": "VGG-11", "small_cnn": "small CNN"}.get(self.model, self.model)
        data = {"cifar10": "CIFAR-10", "digits": "digits (scikit-learn)"}[self.dataset]
        return (
            f"{model} / {data}, Dirichlet φ = {self.phi:g}, batch {self.batch_size}, "
            f"{self.epochs} epochs"
        )

    def memory_bytes(self, *, agents: int, runs: int) -> dict[str, float]:
        """What a group of runs holds, by part: every agent's parameters with the
        algorithm's buffers and gradients, each agent's model replica and the batched
        gradient's copies of them, and the data set (CIFAR-10: 50,000 + 10,000 images)."""
        iterate = self.iterate_bytes(agents=agents, runs=runs)
        images = {"cifar10": 60_000 * 3 * 32 * 32, "digits": 1_797 * 64}[self.dataset]
        return {
            "parameters, algorithm buffers and gradients": 6 * iterate,
            "model replicas and batched-gradient copies": 4 * iterate,
            "data set (and its copy on the device)": 2 * 4 * images,
        }

    def iterate_bytes(self, *, agents: int, runs: int) -> float:
        """Every agent's parameters, of every run of a group."""
        params = sum(p.numel() for p in make_model(self.model).parameters())
        return getattr(torch, self.dtype).itemsize * agents * runs * params

    def check(self, iterations: int | None) -> None:
        try:
            device = torch.device(self.device)
        except RuntimeError:
            raise ValueError(
                f'\'device\' {self.device!r} is not a device; use "cpu", "cuda" or "cuda:N"'
            ) from None
        if device.type not in ("cpu", "cuda", "mps"):
            raise ValueError(
                f'\'device\' {self.device!r}: training runs on "cpu", "cuda" or "mps" '
                f"(a {device.type} device holds no data to train on)"
            )
        if iterations is not None:
            raise ValueError("a neural run is sized in epochs: drop 'iterations', set 'epochs'")
        if self.model not in MODELS:
            raise ValueError(unknown_name("model", self.model, MODELS))
        if self.dataset == "cifar10" and not self.data_dir:
            raise ValueError("dataset 'cifar10' needs data_dir = \"path/to/cifar-10-batches-py\"")
        if not all(0 < m < self.epochs for m in self.milestones):
            raise ValueError(f"'milestones' must be epochs between 1 and {self.epochs - 1}")

    def build(
        self, *, agents: int, runs: int, seed: int, rank: int | range | None
    ) -> NeuralProblem | BatchedRuns:
        if runs > 1:  # run r as alone: data seed + r
            return BatchedRuns(
                [self._one(agents=agents, seed=seed + r, rank=rank) for r in range(runs)]
            )
        return self._one(agents=agents, seed=seed, rank=rank)

    def _one(self, *, agents: int, seed: int, rank: int | range | None) -> NeuralProblem:
        device = torch.device(self.device) if rank is None else device_for_rank()
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"device '{self.device}' but no CUDA GPU is available; use "
                "--set 'problem_params.device=\"cpu\"' (slow) or a GPU machine"
            )
        data = _dataset(self.dataset, self.data_dir, self.dtype)
        mine = None if rank is None else (rank,) if isinstance(rank, int) else tuple(rank)
        share = self.batch_size if self.min_share is None else self.min_share
        split = dirichlet_split(data.y_train.numpy(), agents, self.phi, seed=seed, min_share=share)
        model = make_model(
            self.model, seed=seed, num_classes=data.classes, in_channels=int(data.x_train.shape[1])
        )
        return NeuralProblem(
            model.to(getattr(torch, self.dtype)),
            data,
            split.indices if mine is None else tuple(split.indices[a] for a in mine),
            batch_size=self.batch_size,
            weight_decay=self.weight_decay,
            augment=augment_cifar if self.augment else None,
            backend=self.backend,
            device=device,
            seed=seed,
            agent_ids=mine,
            mean_share=float(np.mean(split.sizes)),
            precision=self.precision,
            channels_last=self.channels_last,
            compile=self.compile,
        )

    def plan(self, problem: NeuralProblem, iterations: int | None, points: int) -> Plan:
        spe = problem.sampler.steps_per_epoch
        evals = [e for e in range(1, self.epochs + 1) if e % self.eval_every == 0]
        return Plan(self.epochs * spe, tuple(sorted(e * spe for e in {*evals, self.epochs})), spe)

    def step_size(self, lr: Any, problem: NeuralProblem) -> Any:
        return epoch_schedule(
            lr,
            problem.sampler.steps_per_epoch,
            milestones=self.milestones,
            gamma=self.gamma,
            warmup_epochs=self.warmup_epochs,
        )

    def run_groups(self, runs: int, agents: int) -> list[tuple[int, ...]]:
        size = self.runs_per_batch
        if size == 0:  # as many as the memory holds, by this kind's own estimate
            one = sum(self.memory_bytes(agents=agents, runs=1).values())
            free = available_memory()
            size = runs if free is None else max(1, min(runs, int(0.8 * free // one)))
        return [tuple(range(a, min(a + size, runs))) for a in range(0, runs, size)]

    @property
    def forkable(self) -> bool:
        """Units go to forked workers (``--jobs``) on the CPU only: a GPU's context does not
        survive a fork, and its memory would be shared by the workers' models."""
        return self.device.split(":")[0] == "cpu"

    def columns(self, problem: NeuralProblem | BatchedRuns) -> list[dict[str, Any]]:
        if isinstance(problem, BatchedRuns):
            return [{"phi": self.phi, "run": r} for r in range(problem.repetitions)]
        return [{"phi": self.phi}]
