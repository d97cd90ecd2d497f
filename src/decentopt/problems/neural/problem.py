"""A neural network replicated over n agents, each with its own share of the data.

Every agent's parameters are one row of a flat ``(n, P)`` tensor (the
algorithm's ``state.x``), so mixing is one kernel over all parameters.
Gradients land in a matching ``(n, P)`` tensor. Two gradient backends:

* ``"loop"``: n module replicas whose parameters are views into the rows of
  ``x`` and whose ``.grad`` are views into the rows of the gradient buffer;
  one forward/backward per agent. Buffers (e.g. BatchNorm statistics) live in
  each replica, so they are per agent and never mixed.
* ``"vmap"``: ``torch.func.vmap`` of ``grad`` over the stacked parameters, one
  batched forward/backward for all agents, dropout drawn independently per
  agent (``randomness="different"``). Models with buffers use ``"loop"``.

``"auto"`` times one gradient evaluation with each backend at start-up and
keeps the faster one.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from decentopt.data.datasets import Dataset
from decentopt.problems.neural.sampler import AgentSampler

if TYPE_CHECKING:
    from decentopt.comm.base import Communicator

__all__ = ["Backend", "NeuralProblem", "Precision"]

Backend = Literal["auto", "loop", "vmap"]
Precision = Literal["auto", "float32", "bf16"]


class NeuralProblem:
    """``n`` agents of one ``nn.Module`` trained on per-agent data.

    Args:
        model: the architecture; its current parameters are every agent's start.
        data: train/test tensors.
        indices: each agent's training-sample indices (e.g. a Dirichlet split).
        batch_size: per-agent mini-batch size.
        weight_decay: added to each gradient as ``wd * x``.
        augment: optional batch transform ``(images, generator) -> images``.
        backend: ``"loop"``, ``"vmap"`` or ``"auto"`` (timed at start-up).
        device: where parameters and data live.
        seed: mini-batch sampling and augmentation seed.
        agent_ids: the global ids of these agents (a distributed rank passes its own).
        mean_share: mean samples per agent over all agents (sets the epoch length).
        precision: ``"bf16"`` runs forward and backward under bf16 autocast while
            parameters, gradients and the algorithm's state stay float32;
            ``"auto"`` (default) is bf16 on CUDA and float32 elsewhere.
        channels_last: feed images in channels-last layout (GPU convolutions).
        compile: ``torch.compile`` the batched gradient (vmap backend); a failure
            warns and falls back to eager.
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
        if backend not in ("auto", "loop", "vmap"):
            raise ValueError(f"backend must be 'auto', 'loop' or 'vmap'; got {backend!r}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0; got {weight_decay}")
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.data = data
        self.n = len(indices)
        self.sampler = AgentSampler(
            tuple(np.asarray(ix) for ix in indices), batch_size, seed, agent_ids, mean_share
        )
        self.weight_decay = float(weight_decay)
        self.augment = augment
        self.generator = torch.Generator().manual_seed(seed)
        self.x_train = data.x_train.to(self.device)
        self.y_train = data.y_train.to(self.device)
        self.names = [name for name, _ in model.named_parameters()]
        self.shapes = [p.shape for _, p in model.named_parameters()]
        self.sizes = [p.numel() for _, p in model.named_parameters()]
        self.dim = int(sum(self.sizes))
        self.dtype = next(model.parameters()).dtype
        self.x_star = None  # no known optimum
        self.has_buffers = any(True for _ in model.buffers())
        self.replicas = [copy.deepcopy(self.model) for _ in range(self.n)]
        self._grad = torch.zeros(self.n, self.dim, device=self.device, dtype=self.dtype)
        self._bind_grads()
        if backend == "vmap" and self.has_buffers:
            raise ValueError(
                "the vmap backend needs a model without buffers (e.g. no BatchNorm); "
                "use backend='loop'"
            )
        if precision not in ("auto", "float32", "bf16"):
            raise ValueError(f"precision must be 'auto', 'float32' or 'bf16'; got {precision!r}")
        #: bf16 autocast of forward and backward; parameters, gradients and the
        #: algorithm's state stay float32. "auto": bf16 on CUDA, float32 elsewhere.
        self.bf16 = precision == "bf16" or (precision == "auto" and self.device.type == "cuda")
        self.channels_last = bool(channels_last)
        self.compile = bool(compile)
        self._compiled: Callable[..., Any] | None = None
        self.backend = backend if backend != "auto" else self._pick_backend()

    # ---------------------------------------------------------------- layout
    def initial_point(self) -> torch.Tensor:
        """Every agent starts from the model's parameters, ``(n, P)``."""
        flat = torch.cat([p.detach().reshape(-1) for p in self.model.parameters()])
        return flat.unsqueeze(0).repeat(self.n, 1)

    def views(self, row: torch.Tensor) -> list[torch.Tensor]:
        """A flat ``(P,)`` (or ``(n, P)``) tensor cut into parameter-shaped views."""
        lead = row.shape[:-1]
        return [
            chunk.view(*lead, *shape)
            for chunk, shape in zip(row.split(self.sizes, dim=-1), self.shapes, strict=True)
        ]

    def _bind_grads(self) -> None:
        for i, replica in enumerate(self.replicas):
            for p, g in zip(replica.parameters(), self.views(self._grad[i]), strict=True):
                p.grad = g

    def _bind_params(self, x: torch.Tensor) -> None:
        """Point every replica's parameters at the rows of ``x`` (no copy)."""
        for i, replica in enumerate(self.replicas):
            for p, v in zip(replica.parameters(), self.views(x[i]), strict=True):
                p.data = v

    def load_average(self, x: torch.Tensor) -> nn.Module:
        """The model with the agents' average parameters (a copy)."""
        model = copy.deepcopy(self.model)
        with torch.no_grad():
            for p, v in zip(model.parameters(), self.views(x.mean(0)), strict=True):
                p.copy_(v)
        return model

    # ------------------------------------------------------------- gradients
    def _batch(self, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.from_numpy(self.sampler.next()).to(self.device)  # (n, B)
        images, labels = self.x_train[idx], self.y_train[idx]
        if self.augment is not None:
            flat = images.reshape(-1, *images.shape[2:])
            images = self.augment(flat, generator).view(images.shape)  # on the device
        return images, labels

    def _loop_grads(self, x: torch.Tensor, images: torch.Tensor, labels: torch.Tensor):
        self._bind_params(x)
        self._grad.zero_()
        losses = torch.empty(self.n, device=self.device)
        for i, replica in enumerate(self.replicas):
            replica.train()
            with self._autocast():
                loss = F.cross_entropy(replica(self._layout(images[i])), labels[i])
            loss.backward()
            losses[i] = loss.detach()
        return self._grad.clone(), losses

    def _vmap_grads(self, x: torch.Tensor, images: torch.Tensor, labels: torch.Tensor):
        from torch.func import functional_call, grad_and_value, vmap

        model = self.model
        model.train()
        names = self.names

        def loss_fn(flat: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            params = dict(zip(names, self.views(flat), strict=True))
            with self._autocast():
                return F.cross_entropy(functional_call(model, params, (self._layout(xb),)), yb)

        batched = vmap(grad_and_value(loss_fn), randomness="different")
        if self.compile:
            return self._run_compiled(batched, x, images, labels)
        grads, losses = batched(x, images, labels)
        return grads, losses

    def _layout(self, images: torch.Tensor) -> torch.Tensor:
        """One agent's ``(B, C, H, W)`` batch, channels-last when asked (faster convolutions
        on GPUs with tensor cores)."""
        if self.channels_last and images.ndim == 4:
            return images.contiguous(memory_format=torch.channels_last)
        return images

    def _autocast(self) -> Any:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def _run_compiled(self, batched: Callable[..., Any], *args: torch.Tensor) -> Any:
        """The batched gradient through ``torch.compile``; on any failure, a warning and
        the eager function from then on."""
        if self._compiled is None:
            self._compiled = torch.compile(batched)
        try:
            return self._compiled(*args)
        except Exception as exc:  # compilers fail in many ways; the run must go on
            warnings.warn(
                f"torch.compile of the batched gradient failed ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); running it eagerly",
                RuntimeWarning,
                stacklevel=3,
            )
            self.compile = False
            return batched(*args)

    def gradient_and_loss(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stochastic gradients ``(n, P)`` (with weight decay) and mini-batch losses ``(n,)``.

        ``generator`` drives the augmentation (the problem's own if omitted);
        mini-batches come from the per-agent sampler, dropout from torch's RNG.
        """
        images, labels = self._batch(self.generator if generator is None else generator)
        if self.backend == "vmap":
            grads, losses = self._vmap_grads(x, images, labels)
        else:
            grads, losses = self._loop_grads(x, images, labels)
        if self.weight_decay:
            grads.add_(x, alpha=self.weight_decay)
        return grads, losses

    def _pick_backend(self) -> Literal["loop", "vmap"]:
        if self.has_buffers:
            return "loop"
        x = self.initial_point()
        state = self.sampler.state_dict()
        gen_state = self.generator.get_state()
        rng_state = torch.get_rng_state()
        timings = {}
        for backend in ("loop", "vmap"):
            self.backend = backend
            self.gradient_and_loss(x)  # warm-up
            start = time.perf_counter()
            self.gradient_and_loss(x)
            timings[backend] = time.perf_counter() - start
        # the timing must not change what the run sees
        self.sampler.load_state_dict(state)
        self.generator.set_state(gen_state)
        torch.set_rng_state(rng_state)
        self.timings = timings
        return min(timings, key=timings.__getitem__)  # type: ignore[return-value]

    # ------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(
        self, model: nn.Module, split: Literal["test", "train"] = "test", batch: int = 1000
    ) -> tuple[float, float]:
        """Mean cross-entropy and accuracy of one model on a split."""
        x = self.data.x_test if split == "test" else self.data.x_train
        y = self.data.y_test if split == "test" else self.data.y_train
        model.eval()
        total, correct, count = 0.0, 0, 0
        for s in range(0, len(y), batch):
            xb, yb = x[s : s + batch].to(self.device), y[s : s + batch].to(self.device)
            out = model(xb)
            total += float(F.cross_entropy(out, yb, reduction="sum"))
            correct += int((out.argmax(1) == yb).sum())
            count += len(yb)
        return total / count, correct / count

    @torch.no_grad()
    def evaluate_agents(
        self, x: torch.Tensor, batch: int = 1000, *, batched: bool | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Test loss and accuracy of every agent's own model, ``(n,)`` each.

        ``batched`` (default: on CUDA): all agents at once, ``vmap`` over the stacked
        parameters, one call per test batch (models without buffers). Otherwise one
        replica at a time -- faster on the CPU (digits, 16 agents: 0.04 s against 0.08 s).
        """
        if batched is None:
            batched = self.device.type == "cuda"
        if self.has_buffers or not batched:
            self._bind_params(x)
            results = [self.evaluate(replica) for replica in self.replicas]
            return np.array([r[0] for r in results]), np.array([r[1] for r in results])
        from torch.func import functional_call, vmap

        model, names = self.model, self.names
        model.eval()

        def logits(flat: torch.Tensor, xb: torch.Tensor) -> torch.Tensor:
            return functional_call(model, dict(zip(names, self.views(flat), strict=True)), (xb,))

        every = vmap(logits, in_dims=(0, None))
        total = torch.zeros(self.n, dtype=torch.float64, device=self.device)
        correct = torch.zeros(self.n, dtype=torch.int64, device=self.device)
        y_all = self.data.y_test
        batch = max(1, batch // self.n)  # images per call over all agents: about ``batch``
        for s in range(0, len(y_all), batch):
            xb = self.data.x_test[s : s + batch].to(self.device)
            yb = y_all[s : s + batch].to(self.device)
            out = every(x, xb)  # (n, b, classes)
            loss = F.cross_entropy(out.flatten(0, 1), yb.repeat(self.n), reduction="none")
            total += loss.view(self.n, -1).sum(1).double()
            correct += (out.argmax(-1) == yb).sum(1)
        count = len(y_all)
        return (total / count).cpu().numpy(), (correct.double() / count).cpu().numpy()

    def metrics(self, x: torch.Tensor, comm: Communicator | None = None) -> dict[str, float]:
        """Test loss/accuracy of the averaged model and (mean over agents) of each agent's
        own model, and the consensus error ``(1/n) sum_i ||x_i - xbar||^2``."""

        def mean(z: torch.Tensor) -> torch.Tensor:
            return z.mean(0, keepdim=True) if comm is None else comm.mean(z)

        def across(values: Any) -> float:
            values = torch.as_tensor(values)
            return float(mean(values.reshape(-1, 1).to(self.device).float()).reshape(-1)[0])

        average = mean(x)
        test_loss, test_acc = self.evaluate(self.load_average(average))
        agent_loss, agent_acc = self.evaluate_agents(x)
        return {
            "test_loss": test_loss,
            "test_acc": test_acc,
            "agent_test_loss": across(agent_loss),
            "agent_test_acc": across(agent_acc),
            "consensus": across((x - average).pow(2).sum(1)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])

    def __repr__(self) -> str:
        return (
            f"NeuralProblem(n={self.n}, P={self.dim}, batch={self.sampler.batch_size}, "
            f"backend={self.backend}, device={self.device})"
        )
