"""The native library: installed or built at first use, checked before it is loaded."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from decentopt import native
from decentopt.native import build

HAS_CC = shutil.which(os.environ.get("CC", "cc")) is not None
needs_cc = pytest.mark.skipif(not HAS_CC, reason="no C compiler")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("DECENTOPT_CACHE", str(folder))
    return folder


def built(folder):
    (so,) = folder.glob("kernels-*.so")
    return so, so.with_suffix(".json")


@needs_cc
def test_a_first_use_build_records_its_checksum_in_a_private_folder(cache):
    lib, why = native.cached_library()
    assert lib is not None, why
    assert lib.origin == "built at first use" and lib.isa in lib.variants
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    so, manifest = built(cache)
    record = json.loads(manifest.read_text())
    assert record["bytes"] == so.stat().st_size and len(record["sha256"]) == 64
    # every variant this CPU runs is there, the best first
    assert lib.variants[-1] == "generic"
    assert set(lib.variants) <= {name for name, _ in build.variants()}


@pytest.mark.slow
@needs_cc
@pytest.mark.parametrize("damage", ["truncate", "flip", "manifest", "no manifest"])
def test_a_damaged_cached_library_is_built_again(cache, damage):
    assert native.cached_library()[0] is not None
    so, manifest = built(cache)
    good = so.read_bytes()

    def replace(data: bytes) -> None:  # a new file: this process maps the old one
        damaged = so.with_name("damaged")
        damaged.write_bytes(data)
        os.replace(damaged, so)

    if damage == "truncate":
        replace(good[: len(good) // 2])
    elif damage == "flip":
        data = bytearray(good)
        data[len(data) // 2] ^= 0xFF
        replace(bytes(data))
    elif damage == "manifest":
        manifest.write_text("[]")
    else:
        manifest.unlink()
    os.chmod(so, 0o700)
    with pytest.warns(RuntimeWarning, match="failed a check"):
        lib, why = native.cached_library()
    assert lib is not None, why
    assert so.read_bytes() == good


@pytest.mark.slow
@needs_cc
def test_a_folder_or_library_writable_by_others_is_refused(cache):
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)
    lib, why = native.cached_library()
    assert lib is None and "writable by its group or by others" in why and "chmod 700" in why
    os.chmod(cache, 0o700)
    assert native.cached_library()[0] is not None
    so, _ = built(cache)
    os.chmod(so, 0o722)  # a library others could have replaced is rebuilt, not loaded
    with pytest.warns(RuntimeWarning, match="writable by its group or by others"):
        assert native.cached_library()[0] is not None
    assert stat.S_IMODE(so.stat().st_mode) == 0o700


def test_without_a_compiler_the_reason_is_given(cache, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler")
    lib, why = native.cached_library()
    assert lib is None and "no C compiler ('no-such-compiler' is not on PATH)" in why


def test_the_library_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("DECENTOPT_NATIVE", "0")
    native.library.cache_clear()
    try:
        assert native.library() == (None, "turned off by DECENTOPT_NATIVE")
    finally:
        monkeypatch.undo()
        native.library.cache_clear()


@needs_cc
def test_a_lower_variant_can_be_chosen_but_not_a_higher_one(cache, monkeypatch):
    monkeypatch.setenv("DECENTOPT_ISA", "generic")
    lib, _ = native.cached_library()
    assert lib is not None and lib.isa == "generic" and lib.variants == ("generic",)
    monkeypatch.setenv("DECENTOPT_ISA", "no-such-isa")
    lib, why = native.cached_library()
    assert lib is None and "DECENTOPT_ISA='no-such-isa'" in why


def test_the_recipe_builds_only_the_baseline_off_x86():
    assert [name for name, _ in build.variants("aarch64")] == ["generic"]
    assert [name for name, _ in build.variants("x86_64")] == ["avx512", "avx2", "generic"]


def test_an_installed_library_of_other_sources_is_not_loaded(monkeypatch):
    lib, why = native.installed_library()
    if lib is None:
        pytest.skip(f"no installed library: {why}")
    monkeypatch.setattr(build, "source_digest", lambda: "0123456789abcdef")
    lib, why = native.installed_library()
    assert lib is None and "built from other sources" in why


def test_describe_says_which_kernels_in_words(monkeypatch):
    """README's one-liner: words, not a tuple with a CDLL repr."""
    native.library.cache_clear()
    try:
        said = native.describe()
        lib, _ = native.library()
        assert "CDLL" not in said and not said.startswith("(")
        if lib is not None:
            assert said.startswith("native kernels: in use") and lib.isa in said
        monkeypatch.setenv("DECENTOPT_NATIVE", "0")
        native.library.cache_clear()
        assert native.describe() == (
            "native kernels: not in use (turned off by DECENTOPT_NATIVE); the simulator "
            "mixes with torch"
        )
    finally:
        monkeypatch.undo()
        native.library.cache_clear()
