from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from decentopt.data import CIFAR10_FILES, augment_cifar, dirichlet_split, load_cifar10, load_digits
from decentopt.data.datasets import CIFAR10_MEAN, CIFAR10_STD


def test_dirichlet_split_covers_every_sample_once():
    labels = np.random.default_rng(0).integers(0, 10, 5000)
    split = dirichlet_split(labels, 16, 0.5, seed=3, min_share=32)
    allidx = np.concatenate(split.indices)
    assert len(allidx) == len(labels) and len(np.unique(allidx)) == len(labels)
    assert split.sizes.min() >= 32
    for ix, row in zip(split.indices, split.histogram, strict=True):
        np.testing.assert_array_equal(np.bincount(labels[ix], minlength=10), row)
    assert "Dirichlet(phi=0.5)" in split.report()


def test_dirichlet_skew_grows_as_phi_shrinks_and_is_reproducible():
    labels = np.random.default_rng(1).integers(0, 10, 20000)
    skews = [dirichlet_split(labels, 16, phi, seed=0).skew() for phi in (100.0, 1.0, 0.1)]
    assert skews[0] < skews[1] < skews[2]
    a = dirichlet_split(labels, 8, 0.3, seed=5)
    b = dirichlet_split(labels, 8, 0.3, seed=5)
    assert all(np.array_equal(x, y) for x, y in zip(a.indices, b.indices, strict=True))


def test_dirichlet_split_errors():
    with pytest.raises(ValueError, match="phi must be > 0"):
        dirichlet_split(np.zeros(10), 2, 0.0)
    with pytest.raises(ValueError, match="at least 8 samples"):
        dirichlet_split(np.zeros(10), 2, 1.0, min_share=8)


def write_fake_cifar(folder, per_batch=6):
    rng = np.random.default_rng(0)
    for name in CIFAR10_FILES:
        batch = {
            b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            b"labels": list(rng.integers(0, 10, per_batch)),
        }
        with open(folder / name, "wb") as fh:
            pickle.dump(batch, fh)


def test_cifar_loader_reads_the_standard_batches(tmp_path):
    write_fake_cifar(tmp_path)
    data = load_cifar10(tmp_path, normalize=False)
    assert data.x_train.shape == (30, 3, 32, 32) and data.x_test.shape == (6, 3, 32, 32)
    with open(tmp_path / "data_batch_1", "rb") as fh:
        raw = pickle.load(fh)
    first = torch.from_numpy(raw[b"data"][0].reshape(3, 32, 32)).float() / 255
    torch.testing.assert_close(data.x_train[0], first)
    assert data.y_train[0] == raw[b"labels"][0]
    normalised = load_cifar10(tmp_path)
    mean = torch.tensor(CIFAR10_MEAN).view(3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(3, 1, 1)
    torch.testing.assert_close(normalised.x_train[0], (first - mean) / std)


def test_cifar_loader_errors_name_the_folder_and_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing data_batch_1.*test_batch"):
        load_cifar10(tmp_path / "nowhere")
    write_fake_cifar(tmp_path)
    (tmp_path / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="not a CIFAR-10 python batch"):
        load_cifar10(tmp_path)


def test_digits_are_real_and_split():
    data = load_digits()
    assert data.x_train.shape[1:] == (1, 8, 8) and len(data.y_train) + len(data.y_test) == 1797
    assert set(data.y_train.tolist()) == set(range(10))


def test_augmentation_crops_and_flips():
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(64, 3, 32, 32) + 1.0  # no zeros, so padding is visible
    out = augment_cifar(images, gen)
    assert out.shape == images.shape
    padded = torch.nn.functional.pad(images, (4, 4, 4, 4))
    flips = crops = 0
    for k in range(len(images)):
        # each output is one 32x32 window of the padded image, possibly mirrored
        found = None
        for dy in range(9):
            for dx in range(9):
                window = padded[k, :, dy : dy + 32, dx : dx + 32]
                if torch.equal(out[k], window):
                    found = (dy, dx, False)
                elif torch.equal(out[k], window.flip(-1)):
                    found = (dy, dx, True)
        assert found is not None, f"image {k} is not a (flipped) crop of its padded input"
        flips += found[2]
        crops += found[:2] != (4, 4)
    assert 16 <= flips <= 48  # about half are mirrored
    assert crops >= 48  # most are shifted (the unshifted window is 1 of 81 offsets)


class _RunsCode:
    """A pickle payload that would run a shell command when loaded."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_a_cifar_batch_that_would_run_code_is_refused_unread(tmp_path):
    write_fake_cifar(tmp_path)
    marker = tmp_path / "ran"
    for name in CIFAR10_FILES:
        with open(tmp_path / name, "wb") as fh:
            pickle.dump({b"data": _RunsCode(marker), b"labels": [0]}, fh)
    with pytest.raises(ValueError, match=r"CIFAR-10 python batch.*refers to (posix|os)\.system"):
        load_cifar10(tmp_path)
    assert not marker.exists()


def test_a_cifar_batch_in_the_python_2_format_loads(tmp_path):
    """The real files: protocol 2, bytes keys, an ndarray of uint8 and a list of ints."""
    write_fake_cifar(tmp_path)
    batch = {b"batch_label": b"training batch 1 of 5", b"labels": [3, 1], b"filenames": [b"a"]}
    batch[b"data"] = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    with open(tmp_path / "data_batch_1", "wb") as fh:
        pickle.dump(batch, fh, protocol=2)
    data = load_cifar10(tmp_path, normalize=False)
    assert data.y_train[:2].tolist() == [3, 1]
