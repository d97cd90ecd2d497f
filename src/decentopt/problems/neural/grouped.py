"""``backend = "grouped"``: the ``N`` replicas of a model as one model.

Every layer runs once for all replicas: a ``Conv2d`` is one grouped convolution over
``N * C`` channels (``groups = N``), a ``Linear`` one batched matmul, ``BatchNorm2d``
one normalisation whose channels are the replicas' own (statistics per replica),
``ReLU`` and pooling act per channel, ``Flatten`` turns ``(B, N*C, H, W)`` into
``(N, B, C*H*W)``, and ``Dropout`` draws each replica's mask from its own generator
(:mod:`.dropout`), so it agrees with the loop backend mask for mask. Activations
between convolutions are ``(B, N*C, H, W)``, channels-last when asked (GPU tensor
cores), and every replica's parameters are views of its row of ``x``: a layer's
weights of all replicas are one ``(N, *shape)`` view (a convolution's is reshaped
to ``(N*O, I, kh, kw)`` inside the layer, where autograd carries its gradient back).
The gradient comes straight back as ``(N, P)``.

Supported: ``nn.Sequential`` models (subclasses too, without a forward of their
own) of ``Conv2d`` (zero padding), ``Linear``, ``ReLU``, ``MaxPool2d``,
``AvgPool2d``, ``AdaptiveAvgPool2d``, ``Flatten``, ``Dropout``, ``BatchNorm2d`` and
``Identity``. Any other layer is refused with a line that names it and ``vmap``.
Measured on a GPU (one NVIDIA H200): 16 VGG-11s as one grouped model ran forward
and backward at 1.7x the images per second of vmap (docs/training.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from decentopt.problems.neural.base import Batch, GradientBackend, Options
from decentopt.problems.neural.dropout import replica_dropout
from decentopt.problems.neural.layout import ParamLayout

__all__ = ["SUPPORTED", "GroupedBackend", "unsupported_layer"]

#: The layers the grouped backend runs.
SUPPORTED: tuple[type[nn.Module], ...] = (
    nn.Conv2d,
    nn.Linear,
    nn.ReLU,
    nn.MaxPool2d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool2d,
    nn.Flatten,
    nn.Dropout,
    nn.BatchNorm2d,
    nn.Identity,
)


def _leaves(module: nn.Module) -> list[nn.Module]:
    """The layers of a (nested) sequential model in the order they run."""
    if isinstance(module, nn.Sequential) and type(module).forward is nn.Sequential.forward:
        return [leaf for child in module for leaf in _leaves(child)]
    return [module]


def unsupported_layer(model: nn.Module) -> str:
    """Why the grouped backend cannot run ``model`` (``""`` when it can)."""
    for layer in _leaves(model):
        if type(layer) not in SUPPORTED:
            return f"its {type(layer).__name__} layer"
        if isinstance(layer, nn.Conv2d) and layer.padding_mode != "zeros":
            return f"a Conv2d with padding_mode={layer.padding_mode!r}"
        if isinstance(layer, nn.Flatten) and (layer.start_dim, layer.end_dim) != (1, -1):
            return "a Flatten over other dimensions than all but the batch"
    return ""


def _same_size(pool: nn.AdaptiveAvgPool2d, h: torch.Tensor) -> bool:
    """Whether ``pool`` leaves the feature maps of ``h`` at their size (pools nothing)."""
    size = pool.output_size
    out = (size, size) if isinstance(size, int) else tuple(size)
    return h.ndim == 4 and all(o is None or o == s for o, s in zip(out, h.shape[2:], strict=True))


class GroupedBackend(GradientBackend):
    name: ClassVar[str] = "grouped"

    def __init__(self, model: nn.Module, layout: ParamLayout, replicas: int, options: Options):
        why = unsupported_layer(model)
        if why:
            raise ValueError(
                f"backend 'grouped' cannot run {type(model).__name__}: {why} is not one of "
                f"{', '.join(t.__name__ for t in SUPPORTED)} in an nn.Sequential; use "
                "backend 'vmap'"
            )
        super().__init__(model, layout, replicas, options)
        self.layers = _leaves(model)
        # per-replica BatchNorm statistics: (N * C,) running mean and variance per layer
        self.running: dict[int, list[torch.Tensor]] = {}
        for k, layer in enumerate(self.layers):
            if isinstance(layer, nn.BatchNorm2d) and layer.track_running_stats:
                assert layer.running_mean is not None and layer.running_var is not None
                self.running[k] = [
                    layer.running_mean.detach().repeat(replicas).to(options.device),
                    layer.running_var.detach().repeat(replicas).to(options.device),
                    torch.zeros((), dtype=torch.long, device=options.device),
                ]

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        params: list[torch.Tensor],
        inp: torch.Tensor,
        train: bool,
        dropout: Sequence[torch.Generator],
    ) -> torch.Tensor:
        """Logits ``(N, B, classes)`` from ``inp`` laid out for the first layer."""
        n = self.count
        views = iter(params)
        h = inp
        for k, layer in enumerate(self.layers):
            if isinstance(layer, nn.Conv2d):
                weight = next(views).flatten(0, 1)  # (N * O, I, kh, kw)
                bias = next(views).reshape(-1) if layer.bias is not None else None
                groups = n * layer.groups  # replica r's channels are the r-th block
                h = F.conv2d(h, weight, bias, layer.stride, layer.padding, layer.dilation, groups)
            elif isinstance(layer, nn.Linear):
                w = next(views)
                if layer.bias is not None:
                    h = torch.baddbmm(next(views).unsqueeze(1), h, w.transpose(1, 2))
                else:
                    h = torch.bmm(h, w.transpose(1, 2))
            elif isinstance(layer, nn.BatchNorm2d):
                weight = next(views).reshape(-1) if layer.affine else None
                bias = next(views).reshape(-1) if layer.affine else None
                h = self._batch_norm(k, layer, h, weight, bias, train)
            elif isinstance(layer, nn.Flatten):
                if h.ndim == 4:  # (B, N*C, H, W) -> (N, B, C*H*W)
                    h = h.reshape(h.shape[0], n, -1).transpose(0, 1)
            elif isinstance(layer, nn.Dropout):
                if train and layer.p > 0:
                    h = self._dropout(h, layer.p, dropout)
            elif isinstance(layer, nn.AdaptiveAvgPool2d) and _same_size(layer, h):
                continue  # the mean of one element each: the identity, exactly
            else:  # ReLU, pooling, Identity: per channel or per element
                h = layer(h)
        return h

    def _batch_norm(
        self,
        k: int,
        layer: nn.BatchNorm2d,
        h: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        train: bool,
    ) -> torch.Tensor:
        stats = self.running.get(k)
        factor = 0.0
        if train and stats is not None:
            stats[2] += 1
            factor = 1.0 / float(stats[2]) if layer.momentum is None else layer.momentum
        use_batch = train or stats is None
        mean, var = (stats[0], stats[1]) if stats is not None else (None, None)
        return F.batch_norm(h, mean, var, weight, bias, use_batch, factor, layer.eps)

    def _dropout(self, h: torch.Tensor, p: float, gens: Sequence[torch.Generator]) -> torch.Tensor:
        n = self.count
        if h.ndim == 4:  # (B, N*C, H, W): replica r's channels are the r-th block
            parts = h.unflatten(1, (n, -1)).unbind(1)
            return torch.stack(
                [replica_dropout(x, p, g) for x, g in zip(parts, gens, strict=True)], dim=1
            ).flatten(1, 2)
        return torch.stack([replica_dropout(x, p, g) for x, g in zip(h, gens, strict=True)])

    def _input(self, images: torch.Tensor) -> torch.Tensor:
        """``(N, B, C, H, W)`` -> ``(B, N*C, H, W)`` (images) or ``(N, B, F)`` (vectors)."""
        if images.ndim != 5:
            return images
        h = images.transpose(0, 1).flatten(1, 2)
        if self.options.channels_last:
            h = h.contiguous(memory_format=torch.channels_last)
        return h

    # ---------------------------------------------------------------- interface
    def _loss(self, x: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels, dropout = batch
        with self.options.autocast():
            logits = self.forward(self.layout.views(x), self._input(images), True, dropout)
        losses = F.cross_entropy(logits.flatten(0, 1).float(), labels.reshape(-1), reduction="none")
        losses = losses.view(labels.shape).mean(1)
        return losses.sum(), losses.detach()

    def gradients(self, x: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.enable_grad():
            leaf = x.detach().requires_grad_(True)
            total, losses = self.run(self._loss, leaf, batch)
            (grad,) = torch.autograd.grad(total, leaf)
        return grad, losses

    @torch.no_grad()
    def logits(self, x: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        shared = images.unsqueeze(0).expand(self.count, *images.shape)
        return self.forward(self.layout.views(x), self._input(shared), False, ())

    def buffers(self) -> list[list[torch.Tensor]]:
        out: list[list[torch.Tensor]] = [[] for _ in range(self.count)]
        for k in sorted(self.running):
            mean, var, count = self.running[k]
            pairs = zip(mean.chunk(self.count), var.chunk(self.count), strict=True)
            for r, (m, v) in enumerate(pairs):
                out[r] += [m, v, count]
        return out
