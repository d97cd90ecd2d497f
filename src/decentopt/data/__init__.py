"""Data: Dirichlet label splits, CIFAR-10 from local files, bundled sets."""

from decentopt.data.datasets import (
    CIFAR10_FILES,
    Dataset,
    augment_cifar,
    load_cifar10,
    load_digits,
)
from decentopt.data.split import DirichletSplit, dirichlet_split

__all__ = [
    "CIFAR10_FILES",
    "Dataset",
    "DirichletSplit",
    "augment_cifar",
    "dirichlet_split",
    "load_cifar10",
    "load_digits",
]
