"""A neural network replicated over n agents, each with its own share of the data.

Every agent's parameters are one row of a flat ``(n, P)`` tensor (the algorithm's
``state.x``), so mixing is one kernel over all parameters, and gradients come back
as a matching ``(n, P)`` tensor. Three gradient backends compute them:

* ``"loop"`` (:mod:`.loop`): one module replica per agent, one forward and
  backward each; any model;
* ``"vmap"`` (:mod:`.vmap`): ``torch.func.vmap`` over the stacked parameters, one
  batched call; models without buffers;
* ``"grouped"`` (:mod:`.grouped`): the replicas as one model of grouped
  convolutions and batched matmuls; sequential models of the common layers.

``"auto"`` picks by a rule, not by a race (:func:`choose_backend`), so two runs of one
command, and a resumed run, compute with the same backend; the choice is kept in
checkpoints and in each result's metadata. Options -- ``precision`` (bf16 autocast),
``channels_last``, ``compile`` -- work with every backend they apply to, or are
refused when the problem is built, in one line (``compile`` with ``loop``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from decentopt._registry import Registry
from decentopt.data.datasets import Dataset
from decentopt.problems.neural.base import Batch, GradientBackend, Options
from decentopt.problems.neural.dropout import dropout_seed
from decentopt.problems.neural.grouped import GroupedBackend, unsupported_layer
from decentopt.problems.neural.layout import ParamLayout
from decentopt.problems.neural.loop import LoopBackend
from decentopt.problems.neural.sampler import AgentSampler
from decentopt.problems.neural.vmap import VmapBackend

if TYPE_CHECKING:
    from decentopt.communicator import Communicator

__all__ = ["ENGINES", "SMALL_MODEL", "Backend", "NeuralProblem", "Precision", "choose_backend"]

Backend = Literal["auto", "loop", "vmap", "grouped"]
Precision = Literal["auto", "float32", "bf16"]

#: The gradient backends by name (``"auto"`` picks one by rule: :func:`choose_backend`).
ENGINES: Registry[type] = Registry(
    "gradient backend", [("loop", LoopBackend), ("vmap", VmapBackend), ("grouped", GroupedBackend)]
)
#: On the CPU, models with fewer parameters than this run faster batched (vmap) than
#: one replica at a time: the digits CNN (38 k parameters, 16 agents) 40 ms against
#: 49 ms per gradient at one thread, 22 against 38 ms at two; VGG-11 (9.2 M) the other
#: way round, 221-231 against 240-266 images/s (README, "Performance").
SMALL_MODEL = 1_000_000


def choose_backend(model: nn.Module, device: torch.device) -> str:
    """The backend ``"auto"`` runs ``model`` with on ``device``: a rule, the same every run.

    On CUDA: ``grouped`` when every layer is one it supports (1.5-1.7x vmap's images
    per second, measured on an H200), else ``vmap``, else (buffers) ``loop``. On the
    CPU: ``vmap`` for models under ``SMALL_MODEL`` parameters, ``loop`` for larger
    ones, and ``grouped`` for models with buffers where it can (``vmap`` cannot).
    """
    buffers = any(True for _ in model.buffers())
    groupable = not unsupported_layer(model)
    if device.type == "cuda":
        return "grouped" if groupable else ("loop" if buffers else "vmap")
    if buffers:
        return "grouped" if groupable else "loop"
    params = sum(p.numel() for p in model.parameters())
    return "vmap" if params < SMALL_MODEL else "loop"


class NeuralProblem:
    """``n`` agents of one ``nn.Module`` trained on per-agent data.

    Args:
        model: the architecture; its current parameters are every agent's start.
        data: train/test tensors.
        indices: each agent's training-sample indices (e.g. a Dirichlet split).
        batch_size: per-agent mini-batch size.
        weight_decay: added to each gradient as ``wd * x``.
        augment: optional batch transform ``(images, generator) -> images``.
        backend: ``"loop"``, ``"vmap"``, ``"grouped"`` or ``"auto"`` (:func:`choose_backend`).
        device: where parameters and data live.
        seed: mini-batch sampling and augmentation seed.
        agent_ids: the global ids of these agents (a distributed rank passes its own).
        mean_share: mean samples per agent over all agents (sets the epoch length).
        precision: ``"bf16"`` runs forward and backward under bf16 autocast while
            parameters, gradients and the algorithm's state stay float32;
            ``"auto"`` (default) is bf16 on CUDA and float32 elsewhere.
        channels_last: feed images in channels-last layout (GPU convolutions).
        compile: ``torch.compile`` the gradient (vmap and grouped backends); a failure
            warns and falls back to eager.

    Dropout: with the loop and grouped backends every agent draws its masks from its
    own generator, seeded from the run's noise seed and the agent's id (the same
    masks either way, and on a distributed rank); vmap draws from torch's generator.
    """

    def __init__(
        self,
        model: nn.Module,
        data: Dataset,
        indices: tuple[np.ndarray, ...],
        *,
        batch_size: int = 32,
        weight_decay: float = 0.0,
        augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
        backend: Backend = "auto",
        device: str | torch.device = "cpu",
        seed: int = 0,
        agent_ids: tuple[int, ...] | None = None,
        mean_share: float | None = None,
        precision: Precision = "auto",
        channels_last: bool = False,
        compile: bool = False,
    ) -> None:
        if backend != "auto" and backend not in ENGINES:
            raise ValueError(f"backend must be 'auto' or one of {tuple(ENGINES)}; got {backend!r}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0; got {weight_decay}")
        if precision not in ("auto", "float32", "bf16"):
            raise ValueError(f"precision must be 'auto', 'float32' or 'bf16'; got {precision!r}")
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.data = data
        self.n = len(indices)
        self.agent_ids = tuple(agent_ids) if agent_ids is not None else tuple(range(self.n))
        self.sampler = AgentSampler(
            tuple(np.asarray(ix) for ix in indices), batch_size, seed, agent_ids, mean_share
        )
        self.weight_decay = float(weight_decay)
        self.augment = augment
        self.generator = torch.Generator().manual_seed(seed)
        self.x_train = data.x_train.to(self.device)
        self.y_train = data.y_train.to(self.device)
        self.layout = ParamLayout.of(model)
        self.dim = self.layout.dim
        self.dtype = next(model.parameters()).dtype
        self.x_star = None  # no known optimum
        #: bf16 autocast of forward and backward. "auto": bf16 on CUDA, float32 elsewhere.
        bf16 = precision == "bf16" or (precision == "auto" and self.device.type == "cuda")
        self.options = Options(self.device, bf16, bool(channels_last), bool(compile))
        self.backend = choose_backend(model, self.device) if backend == "auto" else backend
        self.engine = self.make_engine(self.n)  # refuses what it cannot run, now
        self.dropout: list[torch.Generator] | None = None

    def make_engine(self, replicas: int) -> GradientBackend:
        """This problem's backend over ``replicas`` replicas of its model."""
        return ENGINES[self.backend](self.model, self.layout, replicas, self.options)

    # ---------------------------------------------------------------- layout
    @property
    def bf16(self) -> bool:
        return self.options.bf16

    def initial_point(self) -> torch.Tensor:
        """Every agent starts from the model's parameters, ``(n, P)``."""
        return self.layout.flatten(self.model).unsqueeze(0).repeat(self.n, 1)

    def views(self, row: torch.Tensor) -> list[torch.Tensor]:
        """A flat ``(P,)`` (or ``(n, P)``) tensor cut into parameter-shaped views."""
        return self.layout.views(row)

    def load_average(self, x: torch.Tensor, buffers: list[list[torch.Tensor]] | None = None):
        """The model with the agents' average parameters and buffers (a copy)."""
        model = copy.deepcopy(self.model)
        each = buffers if buffers is not None else self.engine.buffers()
        with torch.no_grad():
            for p, v in zip(model.parameters(), self.views(x.mean(0)), strict=True):
                p.copy_(v)
            for k, b in enumerate(model.buffers()):
                values = torch.stack([row[k] for row in each])
                b.copy_(values.float().mean(0) if b.is_floating_point() else values.max())
        return model

    # ------------------------------------------------------------- gradients
    def batch(self, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Every agent's next mini-batch ``(n, B, ...)`` and labels ``(n, B)``, augmented."""
        idx = torch.from_numpy(self.sampler.next()).to(self.device)  # (n, B)
        images, labels = self.x_train[idx], self.y_train[idx]
        if self.augment is not None:
            flat = images.reshape(-1, *images.shape[2:])
            images = self.augment(flat, generator).view(images.shape)  # on the device
        return images, labels

    def dropout_generators(self, generator: torch.Generator) -> list[torch.Generator]:
        """Each agent's dropout generator, seeded from the noise generator's seed."""
        if self.dropout is None:
            base = generator.initial_seed()
            self.dropout = [
                torch.Generator(device=self.device).manual_seed(dropout_seed(base, a))
                for a in self.agent_ids
            ]
        return self.dropout

    def gradient_and_loss(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stochastic gradients ``(n, P)`` (with weight decay) and mini-batch losses ``(n,)``.

        ``generator`` drives the augmentation (the problem's own if omitted) and seeds
        the agents' dropout generators; mini-batches come from the per-agent sampler.
        """
        generator = self.generator if generator is None else generator
        batch = Batch(*self.batch(generator), self.dropout_generators(generator))
        grads, losses = self.engine.gradients(x, batch)
        if self.weight_decay:
            grads.add_(x, alpha=self.weight_decay)
        return grads, losses

    # ------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(
        self, model: nn.Module, split: Literal["test", "train"] = "test", batch: int = 1000
    ) -> tuple[float, float]:
        """Mean cross-entropy and accuracy of one model on a split."""
        x = self.data.x_test if split == "test" else self.data.x_train
        y = self.data.y_test if split == "test" else self.data.y_train
        model.eval()
        total = 0.0
        correct = 0
        for xb, yb in zip(x.split(batch), y.split(batch), strict=True):
            yb = yb.to(self.device)
            out = model(xb.to(self.device))
            total += float(F.cross_entropy(out, yb, reduction="sum"))
            correct += int((out.argmax(1) == yb).sum())
        return total / len(y), correct / len(y)

    @torch.no_grad()
    def evaluate_replicas(
        self, engine: GradientBackend, x: torch.Tensor, batch: int = 1000
    ) -> tuple[np.ndarray, np.ndarray]:
        """Test loss and accuracy of every replica ``x`` (``(N, P)``) of ``engine``, ``(N,)``
        each: one call per test batch for all replicas."""
        replicas = x.shape[0]
        total = torch.zeros(replicas, dtype=torch.float64, device=self.device)
        correct = torch.zeros(replicas, dtype=torch.int64, device=self.device)
        batch = max(1, batch // replicas)  # images per call over all replicas: about ``batch``
        images = self.data.x_test.split(batch)
        for xb, yb in zip(images, self.data.y_test.split(batch), strict=True):
            yb = yb.to(self.device)
            out = engine.logits(x, xb.to(self.device)).float()  # (N, b, classes)
            loss = F.cross_entropy(out.flatten(0, 1), yb.repeat(replicas), reduction="none")
            total += loss.view(replicas, -1).sum(1).double()
            correct += (out.argmax(-1) == yb).sum(1)
        count = len(self.data.y_test)
        return (total / count).cpu().numpy(), (correct.double() / count).cpu().numpy()

    def evaluate_agents(self, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Test loss and accuracy of every agent's own model, ``(n,)`` each."""
        return self.evaluate_replicas(self.engine, x)

    def metrics(
        self,
        x: torch.Tensor,
        comm: Communicator | None = None,
        agents: tuple[np.ndarray, np.ndarray] | None = None,
        buffers: list[list[torch.Tensor]] | None = None,
    ) -> dict[str, float]:
        """Test loss/accuracy of the averaged model and (mean over agents) of each agent's
        own model, and the consensus error ``(1/n) sum_i ||x_i - xbar||^2``.

        ``agents`` and ``buffers``: the agents' evaluation and buffers when another engine
        holds them (runs stepped together)."""

        def mean(z: torch.Tensor) -> torch.Tensor:
            return z.mean(0, keepdim=True) if comm is None else comm.mean(z)

        def across(values: Any) -> float:
            values = torch.as_tensor(values)
            return float(mean(values.reshape(-1, 1).to(self.device).float()).reshape(-1)[0])

        average = mean(x)
        test_loss, test_acc = self.evaluate(self.load_average(average, buffers))
        agent_loss, agent_acc = agents if agents is not None else self.evaluate_agents(x)
        return {
            "test_loss": test_loss,
            "test_acc": test_acc,
            "agent_test_loss": across(agent_loss),
            "agent_test_acc": across(agent_acc),
            "consensus": across((x - average).pow(2).sum(1)),
        }

    # ---------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Plain data and tensors: the sampler, the backend, dropout streams, buffers."""
        return {
            "sampler": self.sampler.state_dict(),
            "backend": self.backend,
            "dropout": [g.get_state() for g in self.dropout or []],
            "buffers": self.engine.buffers(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        saved = state.get("backend", self.backend)
        if saved != self.backend:  # resume with the backend the run started with
            self.backend = saved
            self.engine = self.make_engine(self.n)
        if state.get("dropout"):
            self.dropout = [torch.Generator(device=self.device) for _ in self.agent_ids]
            for g, s in zip(self.dropout, state["dropout"], strict=True):
                g.set_state(s)
        if state.get("buffers"):
            self.engine.load_buffers(state["buffers"])

    def __repr__(self) -> str:
        return (
            f"NeuralProblem(n={self.n}, P={self.dim}, batch={self.sampler.batch_size}, "
            f"backend={self.backend}, device={self.device})"
        )
