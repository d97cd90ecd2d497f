"""Ranks that disagree stop at once, on every rank, with one line naming the rank and what
differs (3 gloo processes on 127.0.0.1; rank 1 differs in one setting per case)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decentopt.distributed import agreement
from tests.distributed.test_distributed import ROOT, free_port, wait_all

WORKER = Path(__file__).with_name("agreement_worker.py")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    out = tmp_path_factory.mktemp("agreement")
    port, procs = free_port(), []
    for rank in range(3):
        env = os.environ | {
            "RANK": str(rank),
            "WORLD_SIZE": "3",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), str(out)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    codes = wait_all(procs, timeout=180)
    logs = [p.stdout.read().decode()[-3000:] for p in procs]
    assert codes == [0, 0, 0], "\n".join(logs)
    return [json.loads((out / f"agreement-rank{r}.json").read_text()) for r in range(3)]


#: case -> what the error must name
DIFFERS = {
    "weights": "graph is ring(3)[metropolis] with n = 3 on rank 1 but ring(3)",
    "model": "group 0 parameter 0 is shape (2, 10), torch.float32 on rank 1 but shape (1, 21)",
    "method": "method is ed (ExactDiffusion) on rank 1 but edm (EDM) on rank 0",
    "dtype": "torch.float64 on rank 1 but shape (1, 21), torch.float32",
    "size": "shape (1, 11)",
    "compression": ".compression is top_k (TopK) on rank 1 but qsgd (QSGD) on rank 0",
    "added": "group 1 parameter 0 is shape (3,)",
    "wrapped": "group 0 lr is 0.02 on rank 1 but 0.01 on rank 0",
}


@pytest.mark.slow  # three processes
@pytest.mark.parametrize("case", list(DIFFERS))
def test_ranks_that_disagree_stop_with_one_line_naming_the_rank_and_field(outcomes, case):
    for rank, seen in enumerate(outcomes):
        message = seen[case]
        assert message.startswith(f"rank {rank}: the ranks disagree on"), message
        assert DIFFERS[case] in message and "rank 1" in message, message
        assert "\n" not in message and "start every rank with the same configuration" in message


@pytest.mark.slow
def test_ranks_that_agree_run(outcomes):
    assert [seen["same"] for seen in outcomes] == ["ok"] * 3


def test_compression_and_nested_settings_are_described_field_by_field():
    import decentopt as dopt

    a = dopt.algorithms.make("choco_dsgd", lr=0.1, gamma=0.5, compression="top_k(0.1)")
    b = dopt.algorithms.make("choco_dsgd", lr=0.1, gamma=0.5, compression="qsgd(4)")
    da, db = agreement.describe_algorithm(a), agreement.describe_algorithm(b)
    assert da["method"].startswith("choco_dsgd") and "0.1" in da.values()
    differ = {k for k in da.keys() | db.keys() if da.get(k) != db.get(k)}
    assert differ and all(".compression" in k for k in differ)


def test_graph_and_layout_descriptions_differ_where_the_ranks_would():
    import decentopt as dopt

    paper = agreement.describe_graph(dopt.topology.ring(3))
    metropolis = agreement.describe_graph(dopt.topology.ring(3, weights="metropolis"))
    assert paper != metropolis
    groups = [{"params": [torch.nn.Parameter(torch.zeros(2, 10))], "lr": 0.1}]
    other = [{"params": [torch.nn.Parameter(torch.zeros(1, 20))], "lr": 0.1}]
    assert agreement.describe_params(groups, ["lr"]) != agreement.describe_params(other, ["lr"])


def test_the_reference_is_the_most_common_setting_and_the_others_are_named():
    a, b, c = b"a", b"b", b"c"
    assert agreement.reference([a, b, a]) == (0, [1])
    assert agreement.reference([b, a, a]) == (1, [0])  # rank 0 is the odd one out
    assert agreement.reference([a, b]) == (0, [1])  # a tie: rank 0's setting
    assert agreement.reference([a, b, c, c]) == (2, [0, 1])
    assert agreement.reference([a, a, a]) == (0, [])


def test_the_first_differing_field_is_named_with_each_ranks_value():
    ref = {"method": "edm (EDM)", "method.lr": "0.1", "graph": "ring(3)"}
    odd = {"method": "edm (EDM)", "method.lr": "0.2", "graph": "ring(4)"}
    said = agreement._difference([ref, odd], 1, 0)
    assert said == "method.lr is 0.2 on rank 1 but 0.1 on rank 0"
    extra = ref | {"group 1 parameter 0": "shape (3,), torch.float32"}
    field = "group 1 parameter 0 is"
    said = agreement._difference([ref, extra], 1, 0)
    assert said == f"{field} shape (3,), torch.float32 on rank 1 but (absent) on rank 0"
    said = agreement._difference([extra, ref], 1, 0)  # a field only the reference has
    assert said == f"{field} (absent) on rank 1 but shape (3,), torch.float32 on rank 0"


def test_every_field_of_the_description_moves_the_digest():
    import decentopt as dopt

    def fields(alg, params, lr=0.1, wd=0.0, graph=None):
        groups = [{"params": params, "lr": lr, "weight_decay": wd}]
        table = agreement.describe_algorithm(alg)
        table |= agreement.describe_graph(graph or dopt.topology.ring(3))
        return table | agreement.describe_params(groups, ("lr", "weight_decay"))

    base_alg = dopt.algorithms.make("edm", lr=0.1, beta=0.9)
    p = [torch.nn.Parameter(torch.zeros(2, 3, dtype=torch.float32))]
    base = fields(base_alg, p)
    variants = {
        "beta": fields(dopt.algorithms.make("edm", lr=0.1, beta=0.8), p),
        "nesterov": fields(dopt.algorithms.make("edm", lr=0.1, beta=0.9, nesterov=True), p),
        "gossip": fields(dopt.algorithms.make("edm", lr=0.1, beta=0.9, gossip="multi_round(2)"), p),
        "shape": fields(base_alg, [torch.nn.Parameter(torch.zeros(3, 2, dtype=torch.float32))]),
        "dtype": fields(base_alg, [torch.nn.Parameter(torch.zeros(2, 3, dtype=torch.float64))]),
        "frozen": fields(base_alg, [torch.nn.Parameter(p[0].detach(), requires_grad=False)]),
        "lr": fields(base_alg, p, lr=0.2),
        "weight decay": fields(base_alg, p, wd=1e-4),
        "graph": fields(base_alg, p, graph=dopt.topology.ring(3, weights="metropolis")),
    }
    for what, table in variants.items():
        assert agreement.digest(table) != agreement.digest(base), what
        assert agreement._difference([base, table], 1, 0) != "their descriptions differ", what
    assert agreement.digest(dict(reversed(list(base.items())))) == agreement.digest(base)
