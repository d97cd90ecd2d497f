"""Data sets as tensors: CIFAR-10 from a local folder, scikit-learn's bundled digits.

Nothing is downloaded. CIFAR-10 is read from the standard python-pickle batches
(``data_batch_1`` ... ``data_batch_5`` and ``test_batch``, as unpacked from
``cifar-10-python.tar.gz``).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["CIFAR10_FILES", "Dataset", "augment_cifar", "load_cifar10", "load_digits"]

CIFAR10_FILES = (*tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


@dataclass(frozen=True)
class Dataset:
    """Train and test tensors (images ``(N, C, H, W)`` float, labels ``(N,)`` int64)."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: int

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name}, train={tuple(self.x_train.shape)}, "
            f"test={tuple(self.x_test.shape)}, classes={self.classes})"
        )


#: The only globals a CIFAR-10 batch refers to: numpy arrays, their dtypes and scalars (under
#: numpy 1 and 2 names). Anything else in a batch file (a call that would run code) is refused.
_CIFAR_GLOBALS = {
    (module, name)
    for module in ("numpy.core.multiarray", "numpy._core.multiarray")
    for name in ("_reconstruct", "scalar")
} | {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("_codecs", "encode"),  # bytes in protocol-2 pickles written by Python 3
}


class _BatchUnpickler(pickle.Unpickler):
    """Reads what a CIFAR-10 python batch holds (dicts, lists, bytes, numbers, numpy
    arrays) and refuses every other global, so a crafted file cannot run anything."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _CIFAR_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"it refers to {module}.{name}, which a CIFAR-10 batch never holds (refused "
            "unread: loading it could run code)"
        )


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with path.open("rb") as fh:
            batch = _BatchUnpickler(fh, encoding="bytes").load()
        data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (pickle.UnpicklingError, KeyError, ValueError, TypeError, EOFError) as exc:
        raise ValueError(
            f"{path} is not a CIFAR-10 python batch (expected a pickled dict with b'data' "
            f"of 3072 bytes per image and b'labels'): {exc}"
        ) from None
    return data, labels


def load_cifar10(folder: str | Path, *, normalize: bool = True) -> Dataset:
    """CIFAR-10 from ``folder`` holding the six python-pickle batch files."""
    folder = Path(folder)
    missing = [name for name in CIFAR10_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"CIFAR-10 not found in {folder}: missing {', '.join(missing)}. Expected the python "
            f"version's files {', '.join(CIFAR10_FILES)} (unpack cifar-10-python.tar.gz and "
            "point to its cifar-10-batches-py folder)"
        )
    parts = [_read_batch(folder / name) for name in CIFAR10_FILES]
    x_train = np.concatenate([p[0] for p in parts[:-1]])
    y_train = np.concatenate([p[1] for p in parts[:-1]])
    x_test, y_test = parts[-1]

    def to_tensor(x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(x).float().div_(255.0)
        if normalize:
            mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
            std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
            t = (t - mean) / std
        return t

    labels = torch.from_numpy(y_train), torch.from_numpy(y_test)
    return Dataset("cifar10", to_tensor(x_train), labels[0], to_tensor(x_test), labels[1], 10)


def load_digits(*, test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """scikit-learn's bundled 8x8 digits (1797 images, 10 classes), standardised."""
    from sklearn.datasets import load_digits as sk_digits

    bunch = sk_digits()
    x = torch.from_numpy(bunch.images.astype(np.float32)).unsqueeze(1) / 16.0
    y = torch.from_numpy(bunch.target.astype(np.int64))
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = round(test_fraction * len(y))
    test, train = perm[:n_test], perm[n_test:]
    mean, std = x[train].mean(), x[train].std()
    x = (x - mean) / std
    return Dataset("digits", x[train], y[train], x[test], y[test], 10)


def augment_cifar(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Standard CIFAR augmentation on a batch: random 32x32 crop of the 4-padded image, flip."""
    b, _, h, w = images.shape
    dev = images.device  # draws come from the (CPU) generator; the work stays on the device
    padded = torch.nn.functional.pad(images, (4, 4, 4, 4))
    dy = torch.randint(0, 9, (b,), generator=generator).to(dev)
    dx = torch.randint(0, 9, (b,), generator=generator).to(dev)
    windows = padded.unfold(2, h, 1).unfold(3, w, 1)  # (b, C, 9, 9, h, w): every crop
    out = windows[torch.arange(b, device=dev), :, dy, dx]
    flip = (torch.rand(b, generator=generator) < 0.5).to(dev)
    out[flip] = out[flip].flip(-1)
    return out
