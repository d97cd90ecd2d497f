"""The deep-training benchmark's tiny CPU mode: the device check runs end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_training

    yield bench_training
    sys.modules.pop("bench_training", None)


def test_the_backends_rows_and_the_fused_step(bench, tmp_path):
    args = ["--device", "cpu", "--tiny", "--no-compile", "--no-end-to-end", "--no-runs"]
    assert bench.main([*args, "--steps", "1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench_training.json").read_text())
    configs = [r["config"] for r in result["rows"]]
    assert configs[0].startswith("ceiling: one model, batch 32")
    for backend in ("loop", "vmap", "grouped"):
        assert f"{backend}, bf16, 4 agents" in configs
    stacked = [r for r in result["rows"] if r.get("agents", 1) > 1]
    assert all(0 < r["non_gradient_share"] < 1 and r["images_per_s"] > 0 for r in stacked)
    assert {f["kernel"] for f in result["fused_step"]} == {"dense", "compiled", "native"}
    table = (tmp_path / "bench_training.md").read_text()
    assert "| configuration | images/s |" in table and "random 1x8x8" in table


@pytest.mark.slow
def test_the_whole_tiny_check_with_reproduce_fig3_end_to_end(bench, tmp_path):
    """The device check's CPU mode: backends with compile, and two epochs of fig3 on random
    images in CIFAR-10's format (loading, augmentation, evaluation, checkpoints)."""
    assert bench.main(["--device", "cpu", "--tiny", "--steps", "1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench_training.json").read_text())
    e2e = result["end_to_end"]
    assert [e["runs"] for e in e2e] == [1, 3]
    assert all(e["epoch_s"] > 0 and e["images_per_s"] > 0 for e in e2e)
    assert any("compile" in r["config"] for r in result["rows"])
    assert "grouped, bf16, 3 runs x 4 agents" in [r["config"] for r in result["rows"]]
    assert result["meta"]["projection"]["epochs_fig3_plus_fig4"] > 0
    assert "`reproduce fig3`, end to end" in (tmp_path / "bench_training.md").read_text()
