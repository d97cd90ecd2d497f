from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from decentopt.data import CIFAR10_FILES, augment_cifar, dirichlet_split, load_cifar10, load_digits


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
    assert abs(float(normalised.x_train.mean())) < 1.0


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
    images = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).view(2, 3, 32, 32)
    out = augment_cifar(images, gen)
    assert out.shape == images.shape
    ones = augment_cifar(torch.ones(64, 3, 32, 32), gen)
    # a shifted crop shows some zero padding in most images; never more than 8 of 32 columns
    zero_cols = (ones[:, 0] == 0).all(dim=1).sum(dim=1)
    assert zero_cols.max() <= 4 and (ones == 0).any()
