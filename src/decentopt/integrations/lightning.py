"""A Lightning strategy, one agent per process: ``DecentralizedStrategy("edm", topology="ring")``.

Each process is an agent with its own copy of the parameters and its own data; nothing
is all-reduced. The optimizer the ``LightningModule`` returns is wrapped
(:func:`decentopt.distributed.wrap`): its step is the agent's local update and the method
gossips it with the neighbours on the graph, so that ``SGD(lr)`` under
``DecentralizedStrategy("edm", beta=0.9)`` is ``DecentralizedOptimizer(params, "edm",
comm, lr=lr, beta=0.9)`` (to rounding)::

    trainer = Trainer(strategy=DecentralizedStrategy("edm", topology="ring", beta=0.9),
                      accelerator="cpu", devices=4)
    trainer.fit(module, loaders)        # `decentopt launch -n 4 train.py`, torchrun, or alone

* Fitting starts from rank 0's parameters (broadcast once), unless it resumes.
* Checkpoints hold the decentralized state: every rank writes its own file (rank 0 the
  path Lightning names, rank ``r`` that path with ``.rank{r}`` appended), with its
  parameters, the base optimizer's state and the method's (``psi``, momentum, the step);
  ``fit(ckpt_path=...)`` resumes every rank from its own.
* Validation runs on each agent's own parameters; a metric logged with
  ``sync_dist=True`` is reduced over the ranks: the agents' mean.
* ``use_distributed_sampler`` (Lightning's default) gives each agent its own shard.

Needs ``pip install decentopt[lightning]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from decentopt import topology as topologies
from decentopt.comm.distributed import DistributedCommunicator
from decentopt.distributed.runtime import broadcast_parameters
from decentopt.distributed.wrap import GossipOptimizer, wrap
from decentopt.integrations.loggers.base import needs

needs("lightning", "lightning", "decentopt.integrations.lightning")

from lightning.fabric.utilities.optimizer import _optimizers_to_device  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy  # noqa: E402
from lightning.pytorch.trainer.states import TrainerFn  # noqa: E402

__all__ = ["DecentralizedStrategy", "rank_path"]


def rank_path(path: str | Path, rank: int) -> str:
    """The checkpoint file of ``rank``: ``path`` itself for rank 0, ``path.rank{r}`` else."""
    return str(path) if rank == 0 else f"{path}.rank{rank}"


class DecentralizedStrategy(DDPStrategy):
    """One agent per process; the module's optimizer wrapped by ``method`` (module docstring).

    Args:
        method: a registered method (``"edm"``, ``"dsgd"``, ...) or a method instance.
        topology: a registered graph's name, built over the world size, or a network.
        graph_options: the graph's own options (``{"weights": "metropolis"}``).
        timeout: seconds a rank waits for a neighbour before it stops with an error.
        **hyperparams: the method's hyper-parameters other than ``lr`` (the base
            optimizer's): ``beta``, ``gossip``, ...
    """

    strategy_name = "decentralized"

    def __init__(
        self,
        method: str | Any = "edm",
        topology: str | Any = "ring",
        *,
        graph_options: dict[str, Any] | None = None,
        timeout: float = 120.0,
        **hyperparams: Any,
    ) -> None:
        super().__init__()
        self.method = method
        self.topology = topology
        self.hyperparams = hyperparams
        self.graph_options = dict(graph_options or {})
        self.gossip_timeout = timeout
        self.comm: DistributedCommunicator | None = None

    def network(self) -> Any:
        """The graph over the world's ranks."""
        if not isinstance(self.topology, str):
            return self.topology
        return topologies.make(self.topology, self.world_size, **self.graph_options)

    def setup(self, trainer: Any) -> None:
        """DDP's set-up without DDP: the module is not wrapped, no gradient is all-reduced,
        and no state is synchronised outside fitting (each agent keeps its own)."""
        assert self.accelerator is not None and self.model is not None
        self.accelerator.setup(trainer)
        self.precision_plugin.convert_module(self.model)
        self.model_to_device()
        fitting = trainer.state.fn == TrainerFn.FITTING
        if fitting:
            if trainer.ckpt_path is None:  # a common start; a resumed agent keeps its own
                broadcast_parameters(self.model)
            self.setup_optimizers(trainer)
        self.setup_precision_plugin()
        if fitting:
            _optimizers_to_device(self.optimizers, self.root_device)

    def setup_optimizers(self, trainer: Any) -> None:
        """The module's optimizers, each wrapped by the method over the graph."""
        super().setup_optimizers(trainer)
        if self.comm is None:
            self.comm = DistributedCommunicator(self.network(), timeout=self.gossip_timeout)
        comm = self.comm
        self.optimizers = [
            o if isinstance(o, GossipOptimizer) else wrap(o, self.method, comm, **self.hyperparams)
            for o in self.optimizers
        ]

    def save_checkpoint(
        self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None
    ) -> None:
        """Every rank writes its own state (:func:`rank_path`)."""
        path = rank_path(filepath, self.global_rank)
        self.checkpoint_io.save_checkpoint(checkpoint, path, storage_options=storage_options)

    def remove_checkpoint(self, filepath: Any) -> None:
        self.checkpoint_io.remove_checkpoint(rank_path(filepath, self.global_rank))

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> Any:
        """Each rank reads its own file."""
        path = rank_path(checkpoint_path, self.global_rank)
        if not Path(path).is_file():
            raise FileNotFoundError(
                f"rank {self.global_rank} has no checkpoint at {path}: a decentralized "
                "checkpoint is one file per rank; resume with the world size it was written by"
            )
        return self.checkpoint_io.load_checkpoint(path, weights_only=weights_only)
