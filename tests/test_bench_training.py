"""The deep-training benchmark's tiny CPU mode: the device check runs end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_training_tiny_mode_writes_its_tables(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_training

    assert (
        bench_training.main(
            ["--device", "cpu", "--tiny", "--no-compile", "--steps", "1", "--out", str(tmp_path)]
        )
        == 0
    )
    result = json.loads((tmp_path / "bench_training.json").read_text())
    configs = [r["config"] for r in result["rows"]]
    assert configs[0].startswith("ceiling: one model, batch 32")
    assert "vmap, bf16, 3 runs x 4 agents" in configs and "loop, float32, 4 agents" in configs
    stacked = [r for r in result["rows"] if r.get("agents", 1) > 1]
    assert all(0 < r["non_gradient_share"] < 1 and r["images_per_s"] > 0 for r in stacked)
    assert result["meta"]["projection"]["epochs_fig3_plus_fig4"] > 0
    table = (tmp_path / "bench_training.md").read_text()
    assert "| configuration | images/s |" in table and "Projected Figures 3 + 4" in table
    assert "random 1x8x8" in table
    sys.modules.pop("bench_training", None)
