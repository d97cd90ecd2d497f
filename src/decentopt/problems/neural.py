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
import functools
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from decentopt._checks import unknown_name
from decentopt._schema import bounded
from decentopt.comm.base import Communicator
from decentopt.data import augment_cifar, dirichlet_split, load_cifar10, load_digits
from decentopt.data.datasets import Dataset
from decentopt.models import MODELS, make_model
from decentopt.problems.base import Plan
from decentopt.schedules import epoch_schedule

__all__ = ["AgentSampler", "NeuralProblem", "NeuralSpec"]

Backend = Literal["auto", "loop", "vmap"]
Precision = Literal["auto", "float32", "bf16"]


@dataclass
class AgentSampler:
    """Per-agent mini-batches without replacement within each agent's epoch.

    Each agent walks through a fresh permutation of its own indices and
    reshuffles when it runs out. Agent ``a`` draws from its own generator seeded
    by ``(seed, a)``, so a distributed rank holding agent ``a`` alone draws the
    same batches as the simulator does for it. The state (generators,
    permutations, positions) is checkpointed so that a resumed run draws the
    same batches.
    """

    indices: tuple[np.ndarray, ...]
    batch_size: int
    seed: int = 0
    agent_ids: tuple[int, ...] | None = None
    #: mean samples per agent over *all* agents (a rank holding one agent passes it,
    #: so that every rank takes the same number of steps per epoch)
    mean_share: float | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {self.batch_size}")
        small = [i for i, ix in enumerate(self.indices) if len(ix) < self.batch_size]
        if small:
            raise ValueError(
                f"agents {small[:5]} hold fewer samples than the batch size {self.batch_size}; "
                "lower the batch size or raise the split's min_share"
            )
        ids = self.agent_ids if self.agent_ids is not None else range(len(self.indices))
        self._rngs = [np.random.default_rng([self.seed, int(a)]) for a in ids]
        self._perm = [rng.permutation(ix) for rng, ix in zip(self._rngs, self.indices, strict=True)]
        self._pos = [0] * len(self.indices)

    def next(self) -> np.ndarray:
        """Sample indices ``(n, batch_size)`` for one step of every agent."""
        out = np.empty((len(self.indices), self.batch_size), dtype=np.int64)
        for i, ix in enumerate(self.indices):
            if self._pos[i] + self.batch_size > len(ix):
                self._perm[i] = self._rngs[i].permutation(ix)
                self._pos[i] = 0
            out[i] = self._perm[i][self._pos[i] : self._pos[i] + self.batch_size]
            self._pos[i] += self.batch_size
        return out

    @property
    def steps_per_epoch(self) -> int:
        """Steps for an average agent to see its data once."""
        mean = self.mean_share or float(np.mean([len(ix) for ix in self.indices]))
        return max(1, int(np.ceil(mean / self.batch_size)))

    def state_dict(self) -> dict[str, Any]:
        return {
            "rng": [rng.bit_generator.state for rng in self._rngs],
            "perm": [p.copy() for p in self._perm],
            "pos": list(self._pos),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for rng, saved in zip(self._rngs, state["rng"], strict=True):
            rng.bit_generator.state = saved
        self._perm = [np.asarray(p) for p in state["perm"]]
        self._pos = list(state["pos"])


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


@functools.lru_cache(maxsize=2)
def _dataset(name: str, folder: str, dtype: str) -> Dataset:
    data = load_cifar10(folder) if name == "cifar10" else load_digits()
    cast = getattr(torch, dtype)
    return Dataset(
        data.name,
        data.x_train.to(cast),
        data.y_train,
        data.x_test.to(cast),
        data.y_test,
        data.classes,
    )


@dataclass(frozen=True)
class NeuralSpec:
    """``problem = "neural"``: a model trained by every agent on its Dirichlet share.

    One unit of work per (algorithm, run); a run is sized in epochs, the step
    size decays by ``gamma`` at the ``milestones`` epochs after a linear warm-up,
    and metrics are evaluated every ``eval_every`` epochs.
    """

    panel: ClassVar[str | None] = None
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
    min_share: int | None = None
    milestones: tuple[int, ...] = ()
    gamma: float = bounded(0.1, above=0)
    warmup_epochs: int = bounded(0, minimum=0)
    weight_decay: float = bounded(0.0, minimum=0)
    augment: bool = False
    eval_every: int = bounded(1, minimum=1)
    device: str = "cpu"
    backend: Literal["auto", "loop", "vmap"] = "auto"
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
        """What one run holds, by part: every agent's parameters with the algorithm's
        buffers and gradients, and the data set (CIFAR-10: 50,000 + 10,000 images)."""
        params = sum(p.numel() for p in make_model(self.model).parameters())
        images = {"cifar10": 60_000 * 3 * 32 * 32, "digits": 1_797 * 64}[self.dataset]
        width = 8 if self.dtype == "float64" else 4
        return {
            "parameters, algorithm buffers and gradients": 6 * width * agents * runs * params,
            "data set": 4 * images,
        }

    def check(self, iterations: int | None) -> None:
        if iterations is not None:
            raise ValueError("a neural run is sized in epochs: drop 'iterations', set 'epochs'")
        if self.model not in MODELS:
            raise ValueError(unknown_name("model", self.model, MODELS))
        if self.dataset == "cifar10" and not self.data_dir:
            raise ValueError("dataset 'cifar10' needs data_dir = \"path/to/cifar-10-batches-py\"")
        if not all(0 < m < self.epochs for m in self.milestones):
            raise ValueError(f"'milestones' must be epochs between 1 and {self.epochs - 1}")

    def build(
        self, *, agents: int, runs: int, seed: int, rank: int | None
    ) -> NeuralProblem | BatchedRuns:
        if runs > 1:  # run r as alone: data seed + r
            return BatchedRuns(
                [self._one(agents=agents, seed=seed + r, rank=rank) for r in range(runs)]
            )
        return self._one(agents=agents, seed=seed, rank=rank)

    def _one(self, *, agents: int, seed: int, rank: int | None) -> NeuralProblem:
        from decentopt.distributed.runtime import device_for_rank

        device = torch.device(self.device) if rank is None else device_for_rank()
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"device '{self.device}' but no CUDA GPU is available; use "
                "--set 'problem_params.device=\"cpu\"' (slow) or a GPU machine"
            )
        data = _dataset(self.dataset, self.data_dir, self.dtype)
        share = self.batch_size if self.min_share is None else self.min_share
        split = dirichlet_split(data.y_train.numpy(), agents, self.phi, seed=seed, min_share=share)
        model = make_model(
            self.model, seed=seed, num_classes=data.classes, in_channels=int(data.x_train.shape[1])
        )
        return NeuralProblem(
            model.to(getattr(torch, self.dtype)),
            data,
            split.indices if rank is None else (split.indices[rank],),
            batch_size=self.batch_size,
            weight_decay=self.weight_decay,
            augment=augment_cifar if self.augment else None,
            backend=self.backend,
            device=device,
            seed=seed,
            agent_ids=None if rank is None else (rank,),
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
            from decentopt.experiments.runner import available_memory

            one = sum(self.memory_bytes(agents=agents, runs=1).values())
            free = available_memory()
            size = runs if free is None else max(1, min(runs, int(0.8 * free // one)))
        return [tuple(range(a, min(a + size, runs))) for a in range(0, runs, size)]

    def columns(self, problem: NeuralProblem | BatchedRuns) -> list[dict[str, Any]]:
        if isinstance(problem, BatchedRuns):
            return [{"phi": self.phi, "run": r} for r in range(problem.repetitions)]
        return [{"phi": self.phi}]
