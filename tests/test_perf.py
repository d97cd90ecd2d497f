"""Process-level settings: the memory a run may use (the system, a container's cgroup, the
address space), and one thread for small dense linear algebra."""

from __future__ import annotations

import subprocess
import sys

import pytest
import threadpoolctl

from decentopt import perf


def fake_cgroups(tmp_path, lines, files):
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text("\n".join(lines) + "\n")
    for name, text in files.items():
        path = tmp_path / "sys" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "sys", tmp_path / "proc"


def test_a_cgroup_v2_limit_leaves_its_room(tmp_path):
    root, proc = fake_cgroups(
        tmp_path,
        ["0::/job"],
        {"job/memory.max": str(3 << 30), "job/memory.current": str(1 << 30)},
    )
    assert perf.cgroup_memory(root, proc) == 2 << 30


def test_a_limit_on_a_parent_cgroup_holds_for_its_children(tmp_path):
    root, proc = fake_cgroups(
        tmp_path,
        ["0::/outer/inner"],
        {
            "outer/inner/memory.max": "max",
            "outer/inner/memory.current": str(1 << 30),
            "outer/memory.max": str(2 << 30),
            "outer/memory.current": str(1536 << 20),
        },
    )
    assert perf.cgroup_memory(root, proc) == 512 << 20


def test_a_cgroup_v1_limit_also_when_its_path_is_hidden_in_a_container(tmp_path):
    root, proc = fake_cgroups(
        tmp_path,
        ["4:memory:/docker/abc", "1:cpu:/"],
        {
            "memory/memory.limit_in_bytes": str(3 << 30),
            "memory/memory.usage_in_bytes": str(1 << 30),
        },
    )
    assert perf.cgroup_memory(root, proc) == 2 << 30


def test_no_limit_is_no_limit(tmp_path):
    root, proc = fake_cgroups(
        tmp_path,
        ["0::/", "4:memory:/"],
        {
            "memory.max": "max",
            "memory.current": "5",
            "memory/memory.limit_in_bytes": "9223372036854771712",
            "memory/memory.usage_in_bytes": "5",
        },
    )
    assert perf.cgroup_memory(root, proc) is None


def test_the_least_room_wins(monkeypatch):
    monkeypatch.setattr(perf, "_mem_available", lambda: 20e9)
    monkeypatch.setattr(perf, "cgroup_memory", lambda: 3e9)
    monkeypatch.setattr(perf, "_address_space_room", lambda: None)
    assert perf.available_memory() == 3e9
    monkeypatch.setattr(perf, "cgroup_memory", lambda: 0.0)
    assert perf.available_memory() == 0.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc")
def test_an_address_space_limit_is_seen():
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30)); "
        "from decentopt import perf; print(perf._address_space_room())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    room = float(done.stdout.strip())
    assert 0 < room < 8 << 30


def _blas_threads() -> set[int]:
    return {
        pool["num_threads"]
        for pool in threadpoolctl.threadpool_info()
        if pool["user_api"] == "blas"
    }


def test_one_thread_sets_torch_and_blas_to_one_and_restores_both():
    import numpy as np
    import torch

    np.linalg.eigvalsh(np.eye(3))  # numpy's BLAS loaded
    previous, blas = torch.get_num_threads(), _blas_threads()
    torch.set_num_threads(2)
    try:
        with perf.one_thread():
            assert torch.get_num_threads() == 1
            assert _blas_threads() <= {1}
        assert torch.get_num_threads() == 2 and _blas_threads() == blas
        with pytest.raises(RuntimeError), perf.one_thread():
            raise RuntimeError("restored on the way out")
        assert torch.get_num_threads() == 2 and _blas_threads() == blas
    finally:
        torch.set_num_threads(previous)


def test_a_graph_spectrum_is_computed_at_one_thread(monkeypatch):
    import numpy as np
    import torch

    from decentopt.topology import star

    seen = []
    real = np.linalg.eigvalsh

    def spy(matrix):
        seen.append((torch.get_num_threads(), _blas_threads()))
        return real(matrix)

    monkeypatch.setattr(np.linalg, "eigvalsh", spy)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        star(12).eigenvalues  # noqa: B018 -- computed on first use
    finally:
        torch.set_num_threads(previous)
    assert seen and all(threads == 1 and blas <= {1} for threads, blas in seen)
