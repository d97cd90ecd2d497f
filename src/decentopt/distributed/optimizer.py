"""``DecentralizedOptimizer``: any registered algorithm as a ``torch.optim`` optimizer.

One agent per process: each step gathers the trainable parameters' values and
gradients into flat rows, runs the algorithm's pure ``step`` (the code the
simulator runs on ``(n, P)``) with its neighbours through the communicator, and
copies the new values into the parameters -- the user's own tensors, never
re-pointed::

    opt = DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, beta=0.9)
    for xb, yb in loader:
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()

It follows ``torch.optim`` semantics:

* ``zero_grad()`` sets gradients to ``None`` by default; a trainable parameter whose
  ``.grad`` is ``None`` at ``step()`` counts as a zero gradient (unlike
  ``torch.optim.SGD``, which skips it): it gossips with its neighbours (consensus
  needs every row), and momentum and weight decay act on it.
* A parameter with ``requires_grad=False`` at ``step()`` is left bit for bit
  unchanged, whenever it was frozen; one unfrozen later trains from then on, its
  algorithm state starting as at ``init``. Every rank must freeze alike (their rows
  are exchanged).
* ``model.to(...)``, ``.double()``, ``load_state_dict`` on the model work as with
  ``torch.optim.SGD``: the optimizer reads the parameters every step and moves its
  state to their dtype and device.
* Parameter groups take their own ``lr``, ``weight_decay`` (coupled, added to the
  gradient) and, for methods with momentum, ``beta`` (``momentum`` is its alias);
  every ``torch.optim.lr_scheduler`` works through ``param_groups[i]["lr"]``.
* ``state_dict()`` has torch's format (each algorithm buffer per parameter, ``step``).
* ``torch.amp.GradScaler``: ``scaler.step(opt)`` hands the optimizer the scale and
  whether this rank found inf/NaN; all ranks agree in one small all-reduce, and if
  any found one, every rank skips the step (gossip rounds stay in step).

Parameters step in buckets of at most ``bucket_cap_mb`` (one gossip round each);
with ``overlap=True`` a bucket steps and starts its neighbour exchange as soon as
backward has accumulated its gradients (:mod:`decentopt.distributed.buckets`), and
``step()`` waits for what is outstanding. The results are those of the blocking
path, bit for bit. Under gradient accumulation, run all but the last backward in
``with opt.no_sync():``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from decentopt import algorithms
from decentopt._checks import as_real
from decentopt.algorithms.base import Algorithm
from decentopt.algorithms.method import as_method
from decentopt.algorithms.registry import check_network
from decentopt.comm.grouped import AgentGroup
from decentopt.comm.watch import GossipWatch
from decentopt.communicator import Communicator
from decentopt.distributed import agreement
from decentopt.distributed.buckets import Bucket, Overlap, plan_buckets, restore_round

__all__ = ["DecentralizedOptimizer"]


def gossips(obj: Any) -> bool:
    """An optimizer that already combines with neighbours (this package's, or a wrapper)."""
    return isinstance(getattr(obj, "comm", None), Communicator)


def check_comm(comm: Any, owner: str) -> None:
    """Refuse at construction what is not a communicator (a topology would fail only at the
    first step)."""
    if not isinstance(comm, Communicator):
        raise TypeError(
            f"{owner}: comm must be a communicator, got {type(comm).__name__}; build one from "
            "the graph, e.g. dopt.comm.DistributedCommunicator(dopt.topology.ring(world))"
        )


def _check_args(params: Any, comm: Any, hyperparams: dict[str, Any]) -> None:
    """Refuse at construction what would fail later, far from the mistake: an optimizer or a
    module in place of the parameters, no communicator, ``beta`` and ``momentum`` both."""
    owner = "DecentralizedOptimizer"
    if isinstance(params, torch.optim.Optimizer) or gossips(params):
        raise TypeError(
            f"{owner} takes the model's parameters, not an optimizer ({type(params).__name__}); "
            "to gossip a torch optimizer's updates use dopt.distributed.wrap(optimizer, ...)"
        )
    if isinstance(params, torch.nn.Module):
        raise TypeError(f"{owner} takes model.parameters(), not the module itself")
    check_comm(comm, owner)
    if "beta" in hyperparams and "momentum" in hyperparams:
        raise ValueError(
            f"{owner}: beta={hyperparams['beta']} and momentum={hyperparams['momentum']} "
            "name the same thing; give one of them"
        )


class DecentralizedOptimizer(torch.optim.Optimizer):
    """One agent's optimizer; neighbours are reached through ``comm``.

    .. math::
        g_i \\leftarrow \\nabla f_i(x_i) + \\lambda_{wd}\\, x_i, \\qquad
        \\text{state} \\leftarrow \\texttt{algorithm.step}(\\text{state}, g, \\texttt{comm})

    Args:
        params: parameters, or a list of parameter-group dicts as in ``torch.optim``.
        algorithm: a registered name (``"edm"``) or an algorithm instance.
        comm: a communicator whose ``mix`` combines this agent's row with its neighbours'.
        weight_decay: coupled L2 penalty added to the gradient (default 0).
        outer: an outer optimizer over the method (SlowMo, DiLoCo): text such as
            ``"nesterov(lr=0.7, beta=0.9, every=500)"``; its state (``outer_x``,
            ``outer_m``) is in :meth:`state_dict` with the method's.
        overlap: step each bucket during backward, as soon as its gradients are ready.
        bucket_cap_mb: largest bucket (DDP's default, 25 MB); one gossip round each.
        **hyperparams: the algorithm's hyper-parameters when given by name
            (``lr``, ``beta``/``momentum``, ``nesterov``, ...).
    """

    #: GradScaler hands ``grad_scale`` and ``found_inf`` to this optimizer's ``step``, as
    #: attributes it sets for the call (and reads as absent otherwise: no class defaults).
    _step_supports_amp_scaling = True

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter] | Iterable[dict[str, Any]],
        algorithm: str | Algorithm[Any],
        comm: Communicator,
        *,
        weight_decay: float = 0.0,
        overlap: bool = False,
        bucket_cap_mb: float = 25.0,
        outer: str | Any = None,
        **hyperparams: Any,
    ) -> None:
        _check_args(params, comm, hyperparams)
        if "momentum" in hyperparams:
            hyperparams["beta"] = hyperparams.pop("momentum")
        if isinstance(algorithm, str):
            alg = algorithms.make(algorithm, **hyperparams)
        else:
            alg = as_method(algorithm).with_hyperparams(**hyperparams)
        alg = alg if outer is None else alg.with_outer(outer)
        if callable(alg.lr):
            raise ValueError(
                "give DecentralizedOptimizer a constant lr and use a torch.optim.lr_scheduler "
                "for schedules"
            )
        if not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be > 0; got {bucket_cap_mb}")
        check_network(alg, comm.topology)
        self.algorithm = alg
        self.comm = comm
        self.overlap = bool(overlap)
        # a time-varying W changes every round: one round (one bucket) per group and step
        varying = comm.topology.period != 1
        self.bucket_bytes = float("inf") if varying else bucket_cap_mb * 2**20
        self._tunable = ("lr", "beta") if "beta" in algorithms.hyperparameters(alg) else ("lr",)
        self._buckets: list[Bucket] = []
        self._layout: tuple = ()
        self._pending: Overlap | None = None
        self._sync = True
        self._agreed: tuple = ()  # the parameter set the ranks last agreed on
        defaults = {k: float(alg.hyperparams()[k]) for k in self._tunable}  # lr, beta
        defaults["weight_decay"] = weight_decay
        super().__init__(params, defaults)  # (refuses an empty parameter list)
        #: an agent of several processes: gradients averaged over them, one starting point
        self._agent = comm if isinstance(comm, AgentGroup) else None
        if self._agent is not None:
            self._agent.share_within_agent(self._params())
        self._check_agreement()
        self._watch = GossipWatch(comm, alg)  # a method that never gossips
        self._steps = 0

    # ----------------------------------------------------------------- groups
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (``torch.optim`` semantics); its buckets are laid out at the next step."""
        if "momentum" in param_group:
            param_group = dict(param_group)
            param_group["beta"] = param_group.pop("momentum")
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        group["weight_decay"] = as_real(group["weight_decay"], "weight_decay")
        if group["weight_decay"] < 0:
            raise ValueError(f"weight_decay must be >= 0; got {group['weight_decay']}")
        self._layout = ()  # laid out anew
        if self.overlap:
            for p in group["params"]:
                p.register_post_accumulate_grad_hook(self._accumulated)

    def _check_agreement(self) -> None:
        """Every rank runs the same method, graph and parameter layout: one small collective
        (:mod:`~decentopt.distributed.agreement`) when built and when the trainable
        parameters change (added, frozen, resized, cast)."""
        key = tuple((id(p), p.requires_grad, p.dtype, tuple(p.shape)) for p in self._params())
        if key == self._agreed:
            return
        fields = agreement.describe_algorithm(self.algorithm)
        fields |= agreement.describe_graph(self.comm.topology)
        fields |= agreement.describe_params(self.param_groups, ("lr", "beta", "weight_decay"))
        fields |= {"bucket size (bytes)": str(self.bucket_bytes), "overlap": str(self.overlap)}
        agreement.agree(self.comm, fields, "the optimizer")
        self._agreed = key

    def _algorithm_for(self, group: dict[str, Any]) -> Any:
        """The algorithm with this group's current hyper-parameters (the base one if unchanged)."""
        now = self.algorithm.hyperparams()
        changes = {k: group[k] for k in self._tunable if group[k] != now[k]}
        return self.algorithm.with_hyperparams(**changes) if changes else self.algorithm

    # ----------------------------------------------------------------- layout
    def _params(self) -> list[torch.nn.Parameter]:
        """Every parameter of every group, in order."""
        return [p for group in self.param_groups for p in group["params"]]

    def _signature(self) -> tuple:
        """What the buckets depend on: which parameters train, their dtypes, devices, steps."""
        return tuple(
            (id(p), p.requires_grad, p.dtype, p.device, self.state.get(p, {}).get("step", 0))
            for p in self._params()
        )

    def _lay_out(self) -> None:
        """Buckets of the trainable parameters, their flat state assembled from each
        parameter's own (moved to its dtype and device), new ones initialised."""
        self._buckets = []
        for g, group in enumerate(self.param_groups):
            alg = self._algorithm_for(group)
            kinds: dict[tuple, list[torch.nn.Parameter]] = {}
            for p in group["params"]:
                if p.requires_grad:
                    key = (p.dtype, p.device, self.state.get(p, {}).get("step", 0))
                    kinds.setdefault(key, []).append(p)
            for (_, _, step), params in kinds.items():
                for indices in plan_buckets(params, self.bucket_bytes):
                    chosen = [params[i] for i in sorted(indices)]  # rows in model order
                    self._buckets.append(self._bucket(g, alg, chosen, step))
        self._layout = self._signature()

    @torch.no_grad()
    def _bucket(self, group: int, alg: Any, params: list, step: int) -> Bucket:
        """A bucket whose flat state is a fresh one (as at ``init``) with the parameters' saved
        pieces copied into its views (:meth:`Bucket.pieces`, an agent field whole), in the
        algorithm's dtype for the field (wider for CHOCO's public copies)."""
        x = torch.cat([p.detach().reshape(-1) for p in params]).unsqueeze(0)
        fresh = alg.init(x.clone(), self.comm)
        own = {k: v.clone() for k, v in fresh.tensors().items() if k != "x"}  # unshared
        bucket = Bucket(group, params, fresh.replace(x=x, t=step, **own), alg)
        pieces = bucket.pieces()
        for p, views in pieces.items():
            for name, view in views.items():
                saved = self.state.get(p, {}).get(name)
                if name == "step" or saved is None:  # a parameter without state yet: as at init
                    continue
                if saved.shape != view.shape:
                    raise RuntimeError(
                        f"the saved {name!r} state of a parameter of shape {tuple(p.shape)} "
                        f"is {tuple(saved.shape)}, not {tuple(view.shape)}; load a state_dict "
                        "saved by an optimizer over the same model and algorithm"
                    )
                view.copy_(saved)
        self.state.update(pieces)
        return bucket

    # ------------------------------------------------------------------- step
    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients only (no bucket steps during them)."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    def _accumulated(self, p: torch.Tensor) -> None:
        """Backward hook: the last gradient of a bucket starts that bucket's step."""
        if not self._sync:
            return
        if self._pending is None:
            self._prepare()
            self._pending = Overlap(self._run_bucket, self._buckets)
        self._pending.accumulated(p)

    def _prepare(self) -> None:
        """Agreement checked, buckets laid out for the parameters as they are now."""
        self._check_agreement()
        if self._layout != self._signature():
            self._lay_out()

    def _run_bucket(self, k: int, grad_scale: float | None = None) -> None:
        bucket = self._buckets[k]
        group = self.param_groups[bucket.group]
        bucket.algorithm = self._algorithm_for(group)  # follows schedulers' changes
        bucket.run(self.comm, grad_scale, group["weight_decay"], self._agent)

    def _skip_for_amp(self) -> tuple[bool, float | None]:
        """(skip this step, the scale to divide gradients by) under a GradScaler."""
        found_inf, grad_scale = vars(self).get("found_inf"), vars(self).get("grad_scale")
        if found_inf is None:
            return False, None
        if self.overlap:
            raise RuntimeError(
                "overlap=True steps each bucket during backward, before a GradScaler has "
                "unscaled and checked the gradients; use overlap=False with a GradScaler "
                "(bf16 autocast needs no scaler)"
            )
        flag = (found_inf.detach().reshape(1, 1) > 0).double()
        skip = float(self.comm.mean(flag).item()) > 0  # any rank: one small all-reduce
        return skip, None if grad_scale is None else float(grad_scale)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        skip, scale = self._skip_for_amp()
        if skip:  # every rank found (or heard of) inf/NaN: nobody steps, nobody gossips
            return loss
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.finish()
        else:
            self._prepare()
            for k in range(len(self._buckets)):
                self._run_bucket(k, scale)
        for bucket in self._buckets:
            bucket.scatter()
            self.state.update(bucket.pieces())
        self._layout = self._signature()
        self._steps += 1
        self._watch.after(self._steps)
        return loss

    @property
    def algorithm_state(self) -> Any:
        """The algorithm state of the first bucket (flat ``(1, P)`` rows)."""
        if self._layout != self._signature():
            self._lay_out()
        return self._buckets[0].state

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """torch's format: per-parameter slices of every algorithm buffer, plus ``step``;
        and the communicator's counters (``"comm"``): its round picks ``W_t`` on a
        time-varying graph (and a compression operator's random stream), so a resumed run
        goes on from the same round."""
        mine = {"algorithm": self.algorithm.name, "comm": dict(vars(self.comm.stats))}
        return super().state_dict() | mine

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; the iterate is the model's current parameters."""
        saved_alg = state_dict.get("algorithm")
        if saved_alg != self.algorithm.name:
            raise ValueError(
                f"checkpoint is for {saved_alg!r}, this optimizer runs {self.algorithm.name!r}"
            )
        counters = state_dict.get("comm")
        state_dict = {k: v for k, v in state_dict.items() if k not in ("algorithm", "comm")}
        super().load_state_dict(state_dict)
        fields = set(self.algorithm.init(torch.zeros(1, 1)).tensors()) - {"x"}
        missing = [
            p for p in self._params() if p.requires_grad and fields - set(self.state.get(p, {}))
        ]
        if missing:
            raise ValueError(
                f"the checkpoint has no {self.algorithm.name} state for {len(missing)} "
                "parameter(s); was it saved by a DecentralizedOptimizer over the same model?"
            )
        self._lay_out()
        restore_round(self.comm, counters, self._buckets)
