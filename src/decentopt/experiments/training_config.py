"""Configuration and runner of neural-network training experiments (paper Figures 3-4).

A training configuration (``problem = "neural"``) names a data set, a model, a
Dirichlet split, the schedule in epochs and the algorithms::

    name = "my-training"
    problem = "neural"
    dataset = "digits"            # or "cifar10" (with data_dir)
    model = "small_cnn"           # or "vgg11"
    agents = 16
    phi = 1.0                     # Dirichlet concentration
    batch_size = 32
    epochs = 30
    milestones = [20, 25]         # epochs at which the step is multiplied by gamma
    runs = 3
    [topology]
    name = "ring"
    [defaults]
    lr = 0.1
    beta = 0.9
    [algorithms.edm]

Each (algorithm, run) trains in its own folder ``OUT/runs/ALG-runK/`` with a
checkpoint after every epoch; finished units are skipped on a rerun and an
interrupted one resumes from its last checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from decentopt import algorithms, topology
from decentopt._checks import unknown_name
from decentopt.comm.distributed import DistributedCommunicator
from decentopt.data import augment_cifar, dirichlet_split, load_cifar10, load_digits
from decentopt.data.datasets import Dataset
from decentopt.dist import runtime as dist_runtime
from decentopt.experiments.config import ConfigError, _fail, check_keys, validate_algorithms
from decentopt.models import MODELS, make_model
from decentopt.perf import keep_freed_memory
from decentopt.problems.neural import NeuralProblem
from decentopt.results import read_csv, write_csv_atomic, write_text_atomic
from decentopt.training import epoch_schedule, train

__all__ = [
    "TrainingConfig",
    "plot_training",
    "run_training",
    "training_summary",
    "validate_training",
]

_KEYS: dict[str, type] = {
    "name": str,
    "description": str,
    "reproduces": str,
    "problem": str,
    "dataset": str,
    "data_dir": str,
    "model": str,
    "agents": int,
    "phi": float,
    "min_share": int,
    "batch_size": int,
    "epochs": int,
    "milestones": list,
    "gamma": float,
    "warmup_epochs": int,
    "weight_decay": float,
    "augment": bool,
    "eval_every": int,
    "runs": int,
    "device": str,
    "backend": str,
    "dtype": str,
    "timeout": float,
    "topology": dict,
    "defaults": dict,
    "algorithms": dict,
    "quick": dict,
}
DATASETS = ("cifar10", "digits")


@dataclass(frozen=True)
class TrainingConfig:
    name: str
    dataset: str
    model: str
    agents: int
    phi: float
    batch_size: int
    epochs: int
    algorithms: dict[str, dict[str, Any]]
    topology: dict[str, Any]
    milestones: tuple[int, ...] = ()
    gamma: float = 0.1
    warmup_epochs: int = 0
    weight_decay: float = 0.0
    augment: bool = False
    eval_every: int = 1
    runs: int = 1
    min_share: int = 0
    data_dir: str = ""
    device: str = "cpu"
    backend: str = "auto"
    dtype: str = "float32"
    timeout: float = 120.0
    description: str = ""
    reproduces: str = ""
    source: str = ""
    metric: str = "test_acc"
    extra: dict[str, Any] = field(default_factory=dict)

    def title(self, modified: bool = False) -> str:
        """A title built from what runs: model, data set, split, topology, schedule."""
        model = {"vgg11": "VGG-11", "small_cnn": "small CNN"}.get(self.model, self.model)
        data = {"cifar10": "CIFAR-10", "digits": "digits (scikit-learn)"}.get(
            self.dataset, self.dataset
        )
        text = (
            f"{model} / {data}, Dirichlet φ = {self.phi:g}, {self.topology['name']} of "
            f"{self.agents} agents, batch {self.batch_size}, {self.epochs} epochs × "
            f"{self.runs} run(s)"
        )
        if self.reproduces and not modified:
            text += f" — the paper's {self.reproduces}"
        return text

    def fingerprint(self, algorithm: str, run: int) -> str:
        payload = {
            k: v
            for k, v in asdict(self).items()
            if k not in ("name", "description", "reproduces", "source", "algorithms")
        }
        payload |= {"algorithm": algorithm, "hp": self.algorithms[algorithm], "run": run}
        blob = json.dumps(payload, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def validate_training(raw: dict[str, Any], source: str) -> TrainingConfig:
    where = source
    required = ("dataset", "model", "agents", "phi", "batch_size", "epochs", "topology")
    check_keys(raw, _KEYS, required, where)
    if raw["dataset"] not in DATASETS:
        raise _fail(where, unknown_name("dataset", raw["dataset"], DATASETS))
    if raw["dataset"] == "cifar10" and not raw.get("data_dir"):
        raise _fail(where, "dataset 'cifar10' needs data_dir = \"path/to/cifar-10-batches-py\"")
    if raw["model"] not in MODELS:
        raise _fail(where, unknown_name("model", raw["model"], MODELS))
    for key in ("agents", "batch_size", "epochs", "runs", "eval_every"):
        if raw.get(key, 1) < 1:
            raise _fail(where, f"'{key}' must be >= 1, got {raw[key]}")
    if not raw["phi"] > 0:
        raise _fail(where, f"'phi' must be > 0, got {raw['phi']}")
    milestones = raw.get("milestones", [])
    if not all(isinstance(m, int) and 0 < m < raw["epochs"] for m in milestones):
        raise _fail(where, f"'milestones' must be epochs between 1 and {raw['epochs'] - 1}")
    if raw.get("backend", "auto") not in ("auto", "loop", "vmap"):
        raise _fail(where, "'backend' must be 'auto', 'loop' or 'vmap'")
    if raw.get("dtype", "float32") not in ("float32", "float64"):
        raise _fail(where, "'dtype' must be 'float32' or 'float64'")
    topo = dict(raw["topology"])
    if topo.get("name") not in topology.REGISTRY:
        raise _fail(
            f"{where} [topology]",
            unknown_name("topology", topo.get("name"), topology.REGISTRY),
        )
    if "n" in topo:
        raise _fail(f"{where} [topology]", "the number of agents is the top-level 'agents'")
    algs = validate_algorithms(raw, where)
    return TrainingConfig(
        name=raw.get("name", Path(source).stem),
        description=raw.get("description", ""),
        reproduces=raw.get("reproduces", ""),
        dataset=raw["dataset"],
        data_dir=raw.get("data_dir", ""),
        model=raw["model"],
        agents=raw["agents"],
        phi=raw["phi"],
        min_share=raw.get("min_share", raw["batch_size"]),
        batch_size=raw["batch_size"],
        epochs=raw["epochs"],
        milestones=tuple(milestones),
        gamma=raw.get("gamma", 0.1),
        warmup_epochs=raw.get("warmup_epochs", 0),
        weight_decay=raw.get("weight_decay", 0.0),
        augment=raw.get("augment", False),
        eval_every=raw.get("eval_every", 1),
        runs=raw.get("runs", 1),
        device=raw.get("device", "cpu"),
        backend=raw.get("backend", "auto"),
        dtype=raw.get("dtype", "float32"),
        timeout=raw.get("timeout", 120.0),
        topology=topo,
        algorithms=algs,
        source=source,
    )


def load_dataset(config: TrainingConfig) -> Dataset:
    if config.dataset == "cifar10":
        return load_cifar10(config.data_dir)
    return load_digits()


def build_problem(
    config: TrainingConfig,
    data: Dataset,
    run: int,
    rank: int | None = None,
    device: str | torch.device | None = None,
) -> NeuralProblem:
    """All agents (simulation), or only agent ``rank`` (one process per agent)."""
    split = dirichlet_split(
        data.y_train.numpy(), config.agents, config.phi, seed=run, min_share=config.min_share
    )
    in_channels = int(data.x_train.shape[1])
    model = make_model(config.model, seed=run, num_classes=data.classes, in_channels=in_channels)
    indices = split.indices if rank is None else (split.indices[rank],)
    return NeuralProblem(
        model.to(getattr(torch, config.dtype)),
        data,
        indices,
        batch_size=config.batch_size,
        weight_decay=config.weight_decay,
        augment=augment_cifar if config.augment else None,
        backend=config.backend,  # type: ignore[arg-type]
        device=device or config.device,
        seed=run,
        agent_ids=None if rank is None else (rank,),
        mean_share=float(np.mean(split.sizes)),
    )


def run_training(
    config: TrainingConfig,
    out: str | Path,
    *,
    force: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Train every (algorithm, run); resumable. Returns all evaluation rows.

    Under ``torchrun`` (``WORLD_SIZE`` > 1) each process trains its own agent
    and gossips with its neighbours; ``agents`` must equal the number of
    processes, and rank 0 writes the results.
    """
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    rank = 0
    comm = None
    if distributed:
        rank, world = dist_runtime.init()
        if world != config.agents:
            raise ConfigError(
                f"{config.source}: {config.agents} agents but {world} processes; launch with "
                f"--nproc-per-node {config.agents} (one agent per process)"
            )
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"{config.source}: device '{config.device}' but no CUDA GPU is "
            "available; use --set 'device=\"cpu\"' (slow) or a GPU machine"
        )
    out = Path(out)
    keep_freed_memory()
    dtype = getattr(torch, config.dtype)
    data = load_dataset(config)
    data = Dataset(
        data.name,
        data.x_train.to(dtype),
        data.y_train,
        data.x_test.to(dtype),
        data.y_test,
        data.classes,
    )
    topo_spec = dict(config.topology)
    topo = topology.make(topo_spec.pop("name"), config.agents, **topo_spec)
    if distributed:
        comm = DistributedCommunicator(topo, timeout=config.timeout)
    device = dist_runtime.device_for_rank() if distributed else None
    say = log if rank == 0 else (lambda _: None)
    rows: list[dict[str, Any]] = []
    for run in range(config.runs):
        for name, hp in config.algorithms.items():
            unit = out / "runs" / f"{name}-run{run}"
            table, meta = unit / "rows.csv", unit / "done.json"
            fingerprint = config.fingerprint(name, run)
            if not force and meta.is_file() and table.is_file():
                if json.loads(meta.read_text()).get("fingerprint") == fingerprint:
                    rows += read_csv(table)
                    continue
            if force and rank == 0:
                shutil.rmtree(unit, ignore_errors=True)
            if distributed:
                torch.distributed.barrier()
            problem = build_problem(config, data, run, rank if distributed else None, device)
            if comm is not None:
                comm.check_consistency(extra=f"{name}:{run}:{problem.dim}")
            steps = problem.sampler.steps_per_epoch
            hp = dict(hp)
            hp["lr"] = epoch_schedule(
                hp["lr"],
                steps,
                milestones=config.milestones,
                gamma=config.gamma,
                warmup_epochs=config.warmup_epochs,
            )
            alg = algorithms.make(name, **hp)
            say(f"{name} run {run}: {problem!r}, {steps} steps per epoch")
            torch.manual_seed(1000 + run + 7919 * rank)  # dropout; a resume restores its RNG
            unit_rows = train(
                alg,
                problem,
                topo,
                epochs=config.epochs,
                eval_every=config.eval_every,
                checkpoint_dir=unit,
                labels={"phi": config.phi, "run": run},
                progress=progress and rank == 0,
                comm=comm,
                log=say,
            )
            if rank == 0:
                write_csv_atomic(table, unit_rows)
                processes = config.agents if distributed else 1
                write_text_atomic(
                    meta,
                    json.dumps(
                        {
                            "fingerprint": fingerprint,
                            "backend": problem.backend,
                            "processes": processes,
                        }
                    ),
                )
            rows += unit_rows
    if rank == 0:
        write_csv_atomic(out / "results.csv", rows)
    if distributed:
        torch.distributed.barrier()
    return rows


def training_summary(rows: list[dict[str, Any]]) -> str:
    """Markdown: final metrics per algorithm, mean ± spread over runs."""
    from decentopt.experiments.summary import ordered_algorithms
    from decentopt.plotting import LABELS

    last: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        key = (row["algorithm"], row["run"])
        if key not in last or row["epoch"] >= last[key]["epoch"]:
            last[key] = row
    cols = [
        ("test_acc", "test acc. (avg model)"),
        ("agent_test_acc", "test acc. (agents)"),
        ("test_loss", "test loss"),
        ("train_loss", "train loss Σ f_i(x_i)"),
        ("consensus", "consensus"),
    ]
    lines = [
        "| method | " + " | ".join(c for _, c in cols) + " | s / epoch (grad + other) |",
        "|" + "---|" * (len(cols) + 2),
    ]
    for alg in ordered_algorithms([a for a, _ in last]):
        finals = [r for (a, _), r in last.items() if a == alg]
        if any(r.get("diverged") == 1 for r in finals):
            lines.append(f"| {LABELS.get(alg, alg)} | diverged |" + " |" * len(cols))
            continue
        cells = []
        for key, _ in cols:
            vals = [float(r[key]) for r in finals]
            cells.append(f"{np.mean(vals):.4g} ± {np.std(vals):.1g}")
        per_epoch = np.mean([(r["grad_seconds"] + r["other_seconds"]) / r["epoch"] for r in finals])
        grad = np.mean([r["grad_seconds"] / r["epoch"] for r in finals])
        lines.append(
            f"| {LABELS.get(alg, alg)} | "
            + " | ".join(cells)
            + f" | {per_epoch:.3g} ({grad:.3g} + {per_epoch - grad:.3g}) |"
        )
    return "\n".join(lines) + "\n"


def plot_training(rows: list[dict[str, Any]], out: str | Path, title: str = "") -> list[Path]:
    """Training loss, test loss and test accuracy against epochs; mean and range over runs."""
    import matplotlib.pyplot as plt

    from decentopt.experiments.summary import ordered_algorithms
    from decentopt.plotting import LABELS, save_figure, style_for

    metrics = [
        ("train_loss", "training loss Σ f_i(x_i)", True),
        ("test_loss", "test loss", True),
        ("test_acc", "test accuracy (averaged model)", False),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    good = [r for r in rows if r.get("diverged") != 1]
    for i, alg in enumerate(ordered_algorithms([r["algorithm"] for r in good])):
        mine = [r for r in good if r["algorithm"] == alg]
        epochs = sorted({r["epoch"] for r in mine})
        style = style_for(alg, i)
        color = style["color"]
        for ax, (key, label, log_scale) in zip(axes, metrics, strict=True):
            vals = [[float(r[key]) for r in mine if r["epoch"] == e] for e in epochs]
            mean = [np.mean(v) for v in vals]
            ax.plot(epochs, mean, label=LABELS.get(alg, alg), **style)
            ax.fill_between(
                epochs,
                [min(v) for v in vals],
                [max(v) for v in vals],
                color=color,
                alpha=0.15,
                lw=0,
            )
            ax.set_xlabel("epoch")
            ax.set_ylabel(label)
            if log_scale:
                ax.set_yscale("log")
            ax.grid(alpha=0.3, lw=0.4)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, out)
