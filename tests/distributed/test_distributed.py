"""The distributed backend against the simulator, with 4 gloo processes on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.results import read_csv
from tests.distributed import worker
from tests.experiments.test_spec import NEURAL

#: every test here starts several processes: the second step of `make test-all`
pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("worker.py")
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int, **extra: str) -> dict[str, str]:
    """The environment of one rank of a local job on ``port`` (one thread, this checkout
    importable), with ``extra`` variables."""
    return os.environ | {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **extra,
    }


def launch(mode: str, out: Path, world: int = 4) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for rank in range(world):
        env = rank_env(rank, world, port)
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), mode, str(out)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    return procs


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("a rank hung: " + p.stdout.read().decode()[-2000:]) from None
    return codes


@pytest.fixture(scope="module")
def equivalence_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    procs = launch("equivalence", out)
    codes = wait_all(procs, timeout=240)
    logs = [p.stdout.read().decode()[-3000:] for p in procs]
    assert codes == [0, 0, 0, 0], "\n".join(logs)
    return [torch.load(out / f"equivalence-rank{r}.pt") for r in range(4)]


def simulated(variant: str, kind: str, topo=None) -> torch.Tensor:
    name, extra = worker.VARIANTS[variant]
    comm = SimulatedCommunicator(topo or worker.home(variant))
    alg = dopt.algorithms.make(name, **worker.hyper(name), **extra)
    if kind == "quadratic":
        prob = worker.quadratic()
        gen = torch.Generator().manual_seed(7)
        state = alg.init(prob.initial_point())
        for _ in range(worker.STEPS):
            state = alg.step(state, prob.gradient(state.x, gen), comm)
        return state.x
    net = worker.tiny_net(range(4))
    state = alg.init(net.initial_point())
    for _ in range(worker.STEPS):
        grads, _ = net.gradient_and_loss(state.x)
        state = alg.step(state, grads, comm)
    return state.x


@pytest.mark.parametrize("kind", ["quadratic", "net", "optimizer"])
@pytest.mark.parametrize("name", list(worker.VARIANTS))
def test_distributed_matches_simulator(equivalence_results, name, kind):
    """Every algorithm: 4 ranks reproduce the simulator's iterates (optimizer: the wrapper)."""
    torch.set_default_dtype(torch.float64)
    want = simulated(name, "net" if kind == "optimizer" else kind)
    got = torch.cat([r[f"{kind}/{name}"] for r in equivalence_results])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-8)
    assert not torch.allclose(want[0], want[1])  # the agents disagree: a real check


@pytest.mark.parametrize("schedule", list(worker.SCHEDULES))
@pytest.mark.parametrize("name", list(worker.VARIANTS))
def test_distributed_matches_simulator_over_time_varying_topologies(
    equivalence_results, name, schedule
):
    """Every algorithm over W_t: each rank derives its round-t peers alone and matches the
    simulator's gather kernel (random matchings seeded by round; one-peer exponential)."""
    if not worker.on_schedules(name):
        pytest.skip("relaying needs one fixed tree, compressed gossip one fixed W")
    torch.set_default_dtype(torch.float64)
    kind, build = worker.SCHEDULES[schedule]
    want = simulated(name, kind, build())
    got = torch.cat([r[f"{schedule}/{name}"] for r in equivalence_results])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-8)
    ring = simulated(name, kind)
    assert not torch.allclose(want, ring)  # W_t made a difference


@pytest.mark.parametrize("graph", list(worker.DIRECTED))
@pytest.mark.parametrize("name", [v for v in worker.VARIANTS if worker.on_directed(v)])
def test_push_sum_over_directed_graphs_matches_simulator(equivalence_results, name, graph):
    """Push-sum methods over a directed graph: each rank sends to its out-neighbours only
    (a column- but not row-stochastic W; the directed one-peer exponential graph)."""
    torch.set_default_dtype(torch.float64)
    kind, build = worker.DIRECTED[graph]
    want = simulated(name, kind, build())
    got = torch.cat([r[f"{graph}/{name}"] for r in equivalence_results])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-8)
    assert not torch.allclose(want, simulated(name, kind))  # the graph made a difference


@pytest.mark.parametrize("name", worker.QUIET)
def test_a_local_step_makes_no_call_on_the_network(equivalence_results, name):
    """Counted on every rank: a local step calls nothing of torch.distributed; a step of
    periodic global averaging calls one all-reduce and nothing else; a gossip step sends;
    an outer optimizer's step adds one all-reduce (after a local step, alone)."""
    alg = worker.method(name)
    reduce = worker.NETWORK_CALLS.index("all_reduce")
    for result in equivalence_results:
        table = result[f"calls/{name}"]
        for t in range(table.shape[0]):
            kind, calls = alg.talks(t), table[t]
            if kind == "none":
                assert int(calls.sum()) == 0, (t, calls)
            elif kind == "all":
                assert int(calls[reduce]) == 1 and int(calls.sum()) == 1, (t, calls)
            elif kind == "gossip+all":
                assert int(calls[reduce]) == 1 and int(calls.sum()) > 1, (t, calls)
            else:
                assert int(calls.sum()) > 0 and int(calls[reduce]) == 0, (t, calls)
        assert any(alg.talks(t) != "gossip" for t in range(table.shape[0]))


@pytest.mark.parametrize("name", [v for v in worker.VARIANTS if "/" in v and v.startswith("choco")])
def test_compressed_gossip_sends_fewer_bytes(equivalence_results, name):
    """The encoded payload is what travels: fewer bytes than the same method uncompressed."""
    plain = name.split("/")[0]
    sent = sum(int(r[f"bytes/{name}"]) for r in equivalence_results)
    full = sum(int(r[f"bytes/{plain}"]) for r in equivalence_results)
    assert 0 < sent < full


def seconds_to_fail(text: str) -> float:
    """The seconds a rank ran its steps before it failed (``step N (S s): ...``), measured
    from when the processes were up: what the code controls, not interpreter start-up."""
    return float(text.split("(", 1)[1].split(" s)", 1)[0])


def test_killed_peer_stops_the_others_with_a_clear_error(tmp_path):
    procs = launch("failure", tmp_path)
    codes = wait_all(procs, timeout=60)
    assert codes[3] == 17
    assert codes[:3] == [3, 3, 3], [p.stdout.read().decode()[-2000:] for p in procs]
    for rank in range(3):
        text = (tmp_path / f"failure-rank{rank}.txt").read_text()
        assert f"rank {rank}: gossip round" in text and "neighbour" in text
        assert "failed at once" in text  # not the configured timeout: the peer is gone
    for rank in (0, 2):  # rank 3's neighbours on the ring name it
        text = (tmp_path / f"failure-rank{rank}.txt").read_text()
        assert "waiting for neighbour 3:" in text
        assert seconds_to_fail(text) < 5.0  # at once: well inside the 5 s gossip timeout


def test_silent_peer_makes_its_neighbours_time_out(tmp_path):
    procs = launch("hang", tmp_path)
    codes = wait_all(procs, timeout=90)
    assert codes[0] == 3 and codes[2] == 3, [p.stdout.read().decode()[-2000:] for p in procs]
    for rank in (0, 2):  # rank 3's neighbours on the ring wait 5 s, then fail clearly
        text = (tmp_path / f"failure-rank{rank}.txt").read_text()
        assert f"rank {rank}: gossip round" in text and "timeout 5 s" in text
        assert "waiting for neighbour 3:" in text and "failed after 5." in text
        assert seconds_to_fail(text) < 2 * 5.0  # the 5 s timeout, and the steps before it


def test_a_rank_that_never_starts_fails_the_others_at_start_up_within_the_timeout():
    """WORLD_SIZE says 3 but only 2 processes start: both fail within 2x the 4 s timeout,
    measured by the rank from when it starts waiting (the seconds its error names), not
    from before the interpreters started."""
    port = free_port()
    code = "from decentopt.distributed import runtime; runtime.init('gloo', timeout=4)"
    procs = []
    for rank in range(2):
        env = os.environ | {
            "RANK": str(rank),
            "WORLD_SIZE": "3",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True
            )
        )
    errors = [p.communicate(timeout=60)[1] for p in procs]
    assert all(p.returncode != 0 for p in procs)
    for rank, err in enumerate(errors):
        said = f"rank {rank}: start-up: not every one of the 3 ranks joined within "
        assert said in err, err[-2000:]
        assert float(err.split(said, 1)[1].split(" s", 1)[0]) < 2 * 4


@pytest.mark.parametrize("stage", ["mean", "barrier"])
def test_a_rank_missing_a_collective_makes_the_others_fail_within_the_timeout(tmp_path, stage):
    procs = launch(f"hang_{stage}", tmp_path)
    codes = wait_all(procs, timeout=60)
    assert codes[:3] == [3, 3, 3], [p.stdout.read().decode()[-2000:] for p in procs]
    for rank in range(3):
        text = (tmp_path / f"failure-rank{rank}.txt").read_text()
        waited = float(text.split(" s:")[0])
        assert waited < 2 * 5.0 and f"rank {rank}:" in text  # within 2x the 5 s timeout
    if stage == "barrier":  # the monitored barrier names the rank that did not arrive
        assert "3" in (tmp_path / "failure-rank0.txt").read_text().split("Underlying")[1]


# the small training config of the experiment tests, with 2 epochs and EDM only
TINY_TRAINING = (
    NEURAL.replace('name = "tiny-train"', 'name = "tiny-dist"')
    .replace("epochs = 3", "epochs = 2")
    .replace("milestones = [2]\n", "")
    .replace("[algorithms.ed]\n", "")
    .replace("runs = 1\n", "runs = 1\ntimeout = 30\n")
)


def test_training_preset_runs_one_agent_per_process(tmp_path):
    """`decentopt launch -n 4 -m decentopt run CONFIG`: torchrun, one agent per rank."""
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TRAINING)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "decentopt",
        "launch",
        "-n",
        "4",
        "-m",
        "decentopt",
        "run",
        str(config),
        "--out",
        str(out),
        "--no-progress",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "| EDM |" in done.stdout and "1 unit(s) computed" in done.stdout
    rows = (out / "results.csv").read_text().splitlines()
    assert len(rows) == 3  # header + 2 epochs
    assert list((out / "runs" / "edm-run0").glob("step-*/rank3.pt"))  # every rank checkpoints
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "0 unit(s) computed, 1 resumed" in again.stdout
    wrong = subprocess.run(
        [
            sys.executable,
            "-m",
            "decentopt",
            "launch",
            "-n",
            "3",
            "-m",
            "decentopt",
            "run",
            str(config),
            "--out",
            str(tmp_path / "o2"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = wrong.stderr + wrong.stdout
    assert wrong.returncode != 0 and "4 agents on 3 processes" in said
    assert "start it with decentopt launch -n 4" in said and "--nproc-per-node" not in said


#: rank 1 dies (kill -9 alike) right after the first complete checkpoint, on the first attempt
FAULTY = """
import os, sys, threading, time
from pathlib import Path
from decentopt.cli import main

out = Path(sys.argv[sys.argv.index("--out") + 1])
if os.environ["RANK"] == "1" and os.environ["DECENTOPT_ATTEMPT"] == "0":
    def die_after_first_checkpoint():
        while not list(out.glob("runs/*/step-*/COMPLETE")):
            time.sleep(0.005)
        os._exit(9)
    threading.Thread(target=die_after_first_checkpoint, daemon=True).start()
sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_worker_is_restarted_and_the_run_ends_as_an_uninterrupted_one(tmp_path):
    """`launch --max-restarts 1`: one of 4 ranks dies mid-training; all restart, resume from
    the last complete checkpoint, and the rows equal those of a run that was never hurt."""
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TRAINING.replace("epochs = 2", "epochs = 3"))
    script = tmp_path / "faulty.py"
    script.write_text(FAULTY)

    def launch_run(out: Path, *extra: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "decentopt", "launch", "-n", "4", *extra]
        cmd += ["run", str(config), "--out", str(out), "--no-progress"]
        env = os.environ | {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env)

    hurt = launch_run(tmp_path / "hurt", "--max-restarts", "1", "--grace", "2", str(script))
    log = hurt.stdout[-3000:] + hurt.stderr[-3000:]
    assert hurt.returncode == 0, log
    assert "rank 1 exited with code 9" in hurt.stderr and "(attempt 2)" in hurt.stderr, log
    assert "resuming edm from step" in hurt.stdout, log
    clean = launch_run(tmp_path / "clean", "-m", "decentopt")
    assert clean.returncode == 0, clean.stderr[-3000:]
    timing = {"grad_seconds", "other_seconds", "wall_seconds"}
    rows = [
        [{k: v for k, v in r.items() if k not in timing} for r in read_csv(t / "results.csv")]
        for t in (tmp_path / "hurt", tmp_path / "clean")
    ]
    assert len(rows[0]) == 3 and rows[0] == rows[1]  # epochs 1-3


def test_without_restarts_a_dead_worker_ends_the_job_with_its_code(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TRAINING)
    script = tmp_path / "faulty.py"
    script.write_text(FAULTY)
    cmd = [sys.executable, "-m", "decentopt", "launch", "-n", "4", "--grace", "1", str(script)]
    cmd += ["run", str(config), "--out", str(tmp_path / "out"), "--no-progress"]
    env = os.environ | {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 9 and "no restarts left" in done.stderr
    assert time.monotonic() - start < 120


#: variants on graphs of their own, compressed gossip among them, one agent per process
OWN_GRAPHS = (
    TINY_TRAINING.replace('name = "tiny-dist"', 'name = "graphs"').replace(
        "epochs = 2", "epochs = 1"
    )
    + '[algorithms.choco]\nmethod = "choco_dsgd"\ncompression = "top_k(0.1)"\ngamma = 0.5\n'
    + '[algorithms.sgp]\ntopology = "directed_ring"\n'
    + '[algorithms.relaysgd]\ntopology = "chain"\n'
)


def test_variants_on_graphs_of_their_own_run_one_agent_per_process(tmp_path):
    """Push-sum over a directed graph, relaying over a chain and compressed gossip, each
    variant on its own graph: over torch.distributed as in the simulator."""
    config = tmp_path / "graphs.toml"
    config.write_text(OWN_GRAPHS)
    cmd = [str(config), "--out", str(tmp_path / "dist"), "--no-progress"]
    done = subprocess.run(
        [sys.executable, "-m", "decentopt", "launch", "-n", "4", "-m", "decentopt", "run", *cmd],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    alone = subprocess.run(
        [sys.executable, "-m", "decentopt", "run", *cmd[:1], "--out", str(tmp_path / "sim"),
         "--no-progress"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert alone.returncode == 0, alone.stderr[-3000:]
    dist, sim = (read_csv(tmp_path / k / "results.csv") for k in ("dist", "sim"))
    last = {r["algorithm"]: r for r in dist}
    assert set(last) == {"edm", "choco", "sgp", "relaysgd"}
    steps = last["edm"]["step"]
    # one message per agent on the directed ring, two on the ring and at the chain's middle
    assert last["sgp"]["busiest_messages"] == steps
    assert last["edm"]["busiest_messages"] == last["relaysgd"]["busiest_messages"] == 2 * steps
    assert last["choco"]["bytes_per_agent"] < 0.25 * last["edm"]["bytes_per_agent"]
    for a, b in zip(sim, dist, strict=True):  # the simulator counts the same messages
        assert (a["algorithm"], a["busiest_messages"]) == (b["algorithm"], b["busiest_messages"])
        assert a["bytes_per_agent"] == pytest.approx(b["bytes_per_agent"]), a["algorithm"]


def test_bounded_staleness_runs_ahead_of_a_slow_neighbour_by_at_most_the_bound(tmp_path):
    """delayed(1, staleness=3), rank 0 sleeping 50 ms a step: its neighbours use messages up
    to 3 rounds old and no older, and finish before it (they do not wait for every step)."""
    procs = launch("stale", tmp_path)
    codes = wait_all(procs, timeout=90)
    assert codes == [0, 0, 0, 0], [p.stdout.read().decode()[-2000:] for p in procs]
    got = [torch.load(tmp_path / f"stale-rank{r}.pt") for r in range(4)]
    assert all(1 <= g["oldest"] <= 3 for g in got), [g["oldest"] for g in got]
    assert got[1]["oldest"] == got[3]["oldest"] == 3  # rank 0's neighbours ran ahead to the bound
    assert got[1]["seconds"] < got[0]["seconds"] and got[3]["seconds"] < got[0]["seconds"]
    assert all(torch.isfinite(g["x"]).all() for g in got)


def test_bounded_staleness_uses_the_ages_the_simulator_gives_under_the_same_compute_times(
    tmp_path,
):
    """3 gloo ranks on a ring, delayed(1, staleness=3), each sleeping its compute time of the
    time model (rank 0 0.24 s a step, the others 0.03 s): every rank uses, step by step and
    neighbour by neighbour, the message ages the simulator's time model gives (the fast ranks
    1, 1, 2, then 3 from rank 0; 1 from each other), and ends at the simulator's iterate."""
    from decentopt.driver.timeline import stale_timeline

    world = 3
    procs = launch("stale_timed", tmp_path, world=world)
    codes = wait_all(procs, timeout=90)
    assert codes == [0] * world, [p.stdout.read().decode()[-2000:] for p in procs]
    got = [torch.load(tmp_path / f"stale_timed-rank{r}.pt") for r in range(world)]
    graph = dopt.topology.ring(world)
    alg = dopt.algorithms.make("dsgd", lr=0.05, gossip=worker.TIMED_GOSSIP)
    prob = worker.timed_problem(world)
    sim = dopt.simulate(alg, prob, graph, worker.TIMED_STEPS, timing=worker.TIMED)
    payload = 3 * 8.0  # one float64 row of d = 3
    want = stale_timeline(worker.TIMED, graph, worker.TIMED_STEPS, payload, 1, 3).ages
    assert sorted(np.unique(want[:, 1:]).tolist()) == [1, 2, 3]  # the ages do vary
    for rank in range(world):
        assert np.array_equal(np.array(got[rank]["ages"]), want[:, rank]), rank
        torch.testing.assert_close(got[rank]["x"][0], sim.final_state.x[rank], rtol=0, atol=1e-12)
    plain_alg = dopt.algorithms.make("dsgd", lr=0.05, gossip="delayed(1)")
    plain = dopt.simulate(plain_alg, prob, graph, worker.TIMED_STEPS)
    assert not torch.allclose(plain.final_state.x, sim.final_state.x, atol=1e-6)  # ages matter


@pytest.mark.parametrize(("mode", "how"), [("failure", "closed the link"), ("hang", "within 5 s")])
def test_bounded_staleness_stops_on_a_dead_neighbour_naming_it(tmp_path, mode, how):
    """Rank 3 exits (or first falls silent) at step 5: its neighbours stop with one line
    naming it, at once (or after the 5 s timeout)."""
    procs = launch(f"stale_{mode}", tmp_path)
    codes = wait_all(procs, timeout=60)
    assert codes[3] == 17 and codes[0] == 3 and codes[2] == 3
    for rank in (0, 2):
        text = (tmp_path / f"failure-rank{rank}.txt").read_text()
        assert "\n" not in text and f"rank {rank}: neighbour 3 " in text and how in text
        assert text.count("rank 3 died, hung or disconnected") == 1  # said once
        # rank 3 stops at step 5 (after ~0.25 s of rank 0's sleeps), or falls silent for 8 s
        # of which the neighbours wait the 5 s timeout
        assert seconds_to_fail(text) < (2 * 5.0 if mode == "hang" else 5.0)
