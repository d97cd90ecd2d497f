"""Models of the paper's experiments: VGG-11 for 32x32 images and a small CNN for digits."""

from __future__ import annotations

import torch
from torch import nn

from decentopt._registry import Registry

__all__ = ["MODELS", "SmallCNN", "make_model", "vgg11"]

_VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def vgg11(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """VGG-11 for 32x32 inputs, without batch norm, with dropout in the classifier.

    The CIFAR variant used by the decentralized-learning code the EDM paper
    builds on: eight 3x3 convolutions with ReLU and five max-pools (32 -> 1),
    then Dropout, 512-512, ReLU, Dropout, 512-512, ReLU, 512-classes.
    About 9.2 M parameters.
    """
    layers: list[nn.Module] = []
    channels = in_channels
    for item in _VGG11:
        if item == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(channels, int(item), 3, padding=1), nn.ReLU(inplace=True)]
            channels = int(item)
    hidden = [m for _ in range(2) for m in (nn.Dropout(), nn.Linear(512, 512), nn.ReLU(True))]
    return nn.Sequential(*layers, nn.Flatten(), *hidden, nn.Linear(512, num_classes))


class SmallCNN(nn.Sequential):
    """A small CNN for 8x8 single-channel digits (about 38 k parameters); any image size
    and channel count runs (a 4 x 4 average pool before the classifier: the identity for
    digits)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__(
            nn.Conv2d(in_channels, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 64),
            nn.ReLU(),
            nn.Dropout(0.25),
            nn.Linear(64, num_classes),
        )


MODELS = Registry("model", [("vgg11", vgg11), ("small_cnn", SmallCNN)])


def make_model(name: str, *, seed: int = 0, **kwargs: object) -> nn.Module:
    """A registered model with parameters initialised from ``seed``."""
    build = MODELS.find(name)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build(**kwargs)  # type: ignore[operator]
