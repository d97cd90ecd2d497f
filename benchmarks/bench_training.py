"""Deep-training throughput: 16 simulated agents of VGG-11 against one model, by backend.

Four parts, each written to ``OUT/bench_training.json`` and ``OUT/bench_training.md``:

1. **Ceiling**: one model trained alone with plain SGD at the agents' total batch
   ``n * b`` and the same precision (float32, bf16).
2. **Backends**: the loop, vmap and grouped gradient backends in float32, bf16 and
   bf16 + ``torch.compile``, for 16 agents and for 3 runs x 16 agents stepped
   together (``BatchedRuns``): images per second against the ceiling, and the
   non-gradient share of a step (EDM's update and the ring mix, through the
   simulator's default mixer).
3. **Fused step**: one EDM step on the ``(n, P)`` state by every mixer that can take
   it -- updated then mixed (the GEMM of ring(16)'s dense W), ``kernel="compiled"``,
   and the fused kernels (``cuda`` on a GPU, ``native`` on a CPU) -- against its
   memory-traffic bound: it reads x, psi, m, g and writes x, psi, m, 3.5 copies of
   the state, measured as copies in the same run.
4. **End to end**: ``reproduce fig3`` for two epochs on random images written in
   CIFAR-10's python batch format to a temporary folder, so loading, augmentation,
   evaluation and checkpoints all run: the second epoch's wall time (evaluation and
   the checkpoint included) for one run and for three runs batched, and from it the
   projected hours of the paper's Figures 3 + 4 (8 methods x 3 runs x their epochs).

Data are random tensors of CIFAR-10's shapes and classes, so the numbers are
throughput only. ``--tiny``: a small model, 4 agents and a few hundred images, so
the whole check runs in about a minute on a CPU (the test suite runs it).

Usage:
  python benchmarks/bench_training.py --device cuda --out results/bench   # an accelerator
  python benchmarks/bench_training.py --device cpu --tiny --out /tmp/b    # a minute on a CPU
"""

from __future__ import annotations

import argparse
import json
import pickle
import platform
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.data import Dataset
from decentopt.models import make_model
from decentopt.perf import keep_freed_memory
from decentopt.problems.neural import BatchedRuns, NeuralProblem

IMAGES_PER_EPOCH = 50_000
METHODS = 8
RUNS = 3


def fake_data(shape: tuple[int, ...], samples: int) -> Dataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, *shape, generator=g, dtype=torch.float32)
    y = torch.randint(0, 10, (samples,), generator=g)
    return Dataset("random, CIFAR-10 shapes", x, y, x[:10], y[:10], 10)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def best_seconds(fn: Callable[[], Any], device: str, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return times


def copy_seconds(n: int, P: int, device: str, repeats: int = 3) -> float:
    z = torch.randn(n, P, device=device, dtype=torch.float32)
    out = torch.empty_like(z)
    return min(best_seconds(lambda: out.copy_(z), device, repeats))


def problem_for(
    model_name: str, shape: tuple[int, ...], *, agents: int, batch: int, seed: int, **options: Any
) -> NeuralProblem:
    data = fake_data(shape, agents * batch * 2)
    chunks = tuple(np.array_split(np.arange(len(data.y_train)), agents))
    model = make_model(model_name, seed=seed, in_channels=shape[0]).float()
    return NeuralProblem(model, data, chunks, batch_size=batch, seed=seed, **options)


def stacked(
    model_name: str,
    shape: tuple[int, ...],
    *,
    agents: int,
    runs: int,
    batch: int,
    steps: int,
    device: str,
    **options: Any,
) -> dict[str, Any]:
    """One configuration: gradient and rest of an EDM step, ``runs`` runs stepped together."""
    channels_last = device.startswith("cuda")
    made = [
        problem_for(
            model_name, shape, agents=agents, batch=batch, seed=r, device=device,
            channels_last=channels_last, **options,
        )
        for r in range(runs)
    ]  # fmt: skip
    problem = made[0] if runs == 1 else BatchedRuns(made)
    comm = SimulatedCommunicator(dopt.topology.ring(agents))
    alg = dopt.algorithms.make("edm", lr=0.01, beta=0.9)
    state = alg.init(problem.initial_point())
    noise = torch.Generator().manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # warm-up (and compilation)
            grads, _ = problem.gradient_and_loss(state.x, noise)
            state = alg.step(state, grads, comm)
    fell_back = bool(options.get("compile")) and bool(problem.engine._compiled.get("failed"))
    t_grad = t_other = 0.0
    for _ in range(steps):
        sync(device)
        t0 = time.perf_counter()
        grads, _ = problem.gradient_and_loss(state.x, noise)
        sync(device)
        t1 = time.perf_counter()
        state = alg.step(state, grads, comm)
        sync(device)
        t_grad += t1 - t0
        t_other += time.perf_counter() - t1
    t_grad, t_other = t_grad / steps, t_other / steps
    flat = state.x.reshape(-1, state.x.shape[-1])
    bound = 3.5 * copy_seconds(flat.shape[0], flat.shape[1], device)
    return {
        "agents": agents * runs,
        "P": made[0].dim,
        "grad_s": t_grad,
        "other_s": t_other,
        "images_per_s": agents * runs * batch / (t_grad + t_other),
        "grad_images_per_s": agents * runs * batch / t_grad,
        "non_gradient_share": t_other / (t_grad + t_other),
        "other_over_bound": t_other / bound,
        "mixer": comm.mixer_for(flat).name,
        "compile_fell_back": fell_back,
        "warnings": [str(w.message).splitlines()[0] for w in caught][:2],
    }


def ceiling(
    model_name: str, shape: tuple[int, ...], *, total_batch: int, precision: str, device: str,
    steps: int,
) -> dict[str, Any]:  # fmt: skip
    """One model alone, plain SGD, at the agents' total batch."""
    model = make_model(model_name, in_channels=shape[0]).float().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(total_batch, *shape, generator=g, dtype=torch.float32).to(device)
    y = torch.randint(0, 10, (total_batch,), generator=g).to(device)
    if device.startswith("cuda"):
        x = x.contiguous(memory_format=torch.channels_last)
        model = model.to(memory_format=torch.channels_last)
    bf16 = precision == "bf16"

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    step()
    seconds = float(np.median(best_seconds(step, device, steps)))
    return {"agents": 1, "images_per_s": total_batch / seconds, "grad_s": seconds}


def fused_steps(agents: int, P: int, device: str, repeats: int) -> list[dict[str, Any]]:
    """One EDM step on an (agents, P) float32 state by every mixer that takes it."""
    topo = dopt.topology.ring(agents)
    alg = dopt.algorithms.make("edm", lr=0.01, beta=0.9)
    x = torch.randn(agents, P, device=device)
    g, state = torch.randn_like(x), alg.init(x)
    bound = 3.5 * copy_seconds(agents, P, device)
    kernels = ["dense", "compiled", "cuda" if device.startswith("cuda") else "native"]
    rows = []
    for kernel in kernels:
        comm = SimulatedCommunicator(topo, kernel=kernel)
        why = comm.mixers[0].supports(x)
        if why:
            rows.append({"kernel": kernel, "skipped": why})
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            times = best_seconds(lambda c=comm: alg.step(state, g, c), device, repeats)
        rows.append(
            {
                "kernel": kernel,
                "step_s": float(np.median(times)),
                "min_over_bound": min(times) / bound,
                "median_over_bound": float(np.median(times)) / bound,
            }
        )
    return rows


def write_cifar(folder: Path, train: int, test: int) -> None:
    """Random images in CIFAR-10's python batch format (five training batches, one test)."""
    rng = np.random.default_rng(0)
    sizes = [train // 5 + (1 if k < train % 5 else 0) for k in range(5)]
    names = [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]
    for name, size in zip(names, [*sizes, test], strict=True):
        batch = {
            b"data": rng.integers(0, 256, size=(size, 3072), dtype=np.uint8),
            b"labels": rng.integers(0, 10, size=size).tolist(),
        }
        with (folder / name).open("wb") as fh:
            pickle.dump(batch, fh)


def end_to_end(device: str, tiny: bool, budget_left: Callable[[], float]) -> list[dict[str, Any]]:
    """``reproduce fig3`` for two epochs: one run, then three runs batched (tiny: the small
    CNN on a few hundred images of CIFAR-10's shape)."""
    from decentopt.experiments import load_spec, run_spec

    train, test = (160, 40) if tiny else (IMAGES_PER_EPOCH, 10_000)
    agents, batch = (4, 8) if tiny else (16, 32)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "cifar-10-batches-py"
        folder.mkdir()
        write_cifar(folder, train, test)
        for runs in (1, RUNS):
            if runs > 1 and budget_left() < 0:
                rows.append({"runs": runs, "skipped": "time budget"})
                continue
            sets = [
                f'problem_params.data_dir="{folder}"', f'problem_params.device="{device}"',
                "problem_params.epochs=2", "problem_params.milestones=[]",
                "problem_params.warmup_epochs=0", "problem_params.eval_every=1",
                f"problem_params.runs_per_batch={runs}", f"runs={runs}", f"agents={agents}",
                f"problem_params.batch_size={batch}", f"problem_params.min_share={batch}",
                f"problem_params.channels_last={str(device.startswith('cuda')).lower()}",
            ]  # fmt: skip
            if tiny:
                sets.append('problem_params.model="small_cnn"')
            spec = load_spec("fig3", overrides=sets).select(["edm"])
            out = Path(tmp) / f"out{runs}"
            start = time.perf_counter()
            outcome = run_spec(spec, out, progress=False, log=lambda _: None)
            total = time.perf_counter() - start
            walls = sorted({r["epoch"]: r["wall_seconds"] for r in outcome.rows}.items())
            epoch = walls[1][1] - walls[0][1]  # the second epoch, warm
            meta = json.loads(next((out / "runs").glob("edm*/meta.json")).read_text())
            rows.append(
                {
                    "runs": runs,
                    "agents": agents,
                    "images_per_epoch": train,
                    "backend": meta.get("backend"),
                    "epoch_s": epoch,
                    "images_per_s": runs * train / epoch,
                    "command_s": total,
                }
            )
    return rows


def study_epochs() -> int:
    """Epochs of the paper's Figures 3 and 4 (the presets), summed."""
    from decentopt.experiments import load_spec

    return sum(load_spec(name).params.epochs for name in ("fig3", "fig4"))


CONFIGS = (
    ("loop", "float32", False),
    ("loop", "bf16", False),
    ("vmap", "float32", False),
    ("vmap", "bf16", False),
    ("grouped", "float32", False),
    ("grouped", "bf16", False),
    ("vmap", "bf16", True),
    ("grouped", "bf16", True),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tiny", action="store_true", help="small CNN, 4 agents: a quick check")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per configuration")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds; later rows skipped")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled rows")
    parser.add_argument("--no-runs", action="store_true", help="skip the 3 runs x n rows")
    parser.add_argument("--no-end-to-end", action="store_true", help="skip reproduce fig3")
    parser.add_argument("--out", type=Path, default=Path("results/bench_training"))
    args = parser.parse_args(argv)
    start = time.monotonic()
    budget_left = lambda: args.budget - (time.monotonic() - start)  # noqa: E731
    if not args.device.startswith("cuda"):
        keep_freed_memory()  # as training does: freed state blocks are not returned per step
    if args.tiny:
        model_name, shape, agents, batch = "small_cnn", (1, 8, 8), 4, 8
    else:
        model_name, shape, agents, batch = "vgg11", (3, 32, 32), 16, 32
    steps = args.steps or (2 if args.tiny else 5)
    cuda = args.device.startswith("cuda")
    name = torch.cuda.get_device_name(0) if cuda else platform.processor() or "CPU"
    rows: list[dict[str, Any]] = []
    for precision in ("float32", "bf16"):
        row = ceiling(
            model_name, shape, total_batch=agents * batch, precision=precision,
            device=args.device, steps=steps,
        )  # fmt: skip
        rows.append({"config": f"ceiling: one model, batch {agents * batch}, {precision}", **row})
    e2e = [] if args.no_end_to_end else end_to_end(args.device, args.tiny, budget_left)
    for backend, precision, compiled in CONFIGS:
        if compiled and args.no_compile:
            continue
        label = f"{backend}, {precision}" + (" + compile" if compiled else "")
        for runs in (1,) if args.no_runs else (1, RUNS):
            who = f"{agents} agents" if runs == 1 else f"{runs} runs x {agents} agents"
            if budget_left() < 0:
                rows.append({"config": f"{label}, {who}", "skipped": "time budget"})
                continue
            row = stacked(
                model_name, shape, agents=agents, runs=runs, batch=batch, steps=steps,
                device=args.device, backend=backend, precision=precision, compile=compiled,
            )  # fmt: skip
            rows.append({"config": f"{label}, {who}", **row})
    P = next((r["P"] for r in rows if "P" in r), None)  # None: every stacked row skipped
    fused = fused_steps(agents, P, args.device, steps) if P and budget_left() > 0 else []
    epochs = study_epochs()
    done = [r for r in e2e if "epoch_s" in r]
    batched = max(done, key=lambda r: r["runs"]) if done else None
    hours = None
    if batched is not None and not args.tiny:
        units = METHODS * RUNS / batched["runs"]  # units of work, each batched["runs"] runs
        hours = units * epochs * batched["epoch_s"] / 3600
    meta = {
        "device": args.device,
        "device_name": name,
        "torch": torch.__version__,
        "model": model_name,
        "agents": agents,
        "batch_per_agent": batch,
        "data": "random tensors of CIFAR-10 shapes" if not args.tiny else "random 1x8x8",
        "steps": steps,
        "projection": {
            "epochs_fig3_plus_fig4": epochs,
            "from": None if batched is None else f"{batched['runs']} run(s) batched, end to end",
            "hours": hours,
        },
        "seconds": time.monotonic() - start,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"meta": meta, "rows": rows, "fused_step": fused, "end_to_end": e2e}
    (args.out / "bench_training.json").write_text(json.dumps(result, indent=1))
    text = markdown(meta, rows, fused, e2e, args.tiny)
    (args.out / "bench_training.md").write_text(text)
    print(text)
    return 0


def markdown(
    meta: dict[str, Any],
    rows: list[dict[str, Any]],
    fused: list[dict[str, Any]],
    e2e: list[dict[str, Any]],
    tiny: bool,
) -> str:
    ceiling_rate = {r["config"].rsplit(", ", 1)[1]: r["images_per_s"] for r in rows[:2]}
    lines = [
        f"Device: {meta['device_name']} ({meta['device']}), torch {meta['torch']}; "
        f"{meta['model']}, batch {meta['batch_per_agent']} per agent, EDM on a ring; data: "
        f"{meta['data']} (throughput only).",
        "",
        "| configuration | images/s | of the ceiling | gradient alone, of the ceiling | "
        "non-gradient share | rest / memory bound | mixer |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['config']} | skipped ({r['skipped']}) | | | | | |")
            continue
        prec = "bf16" if "bf16" in r["config"] else "float32"
        share = r["images_per_s"] / ceiling_rate[prec]
        if "non_gradient_share" in r:
            extra = [
                f"{r['grad_images_per_s'] / ceiling_rate[prec]:.0%}",
                f"{r['non_gradient_share']:.1%}",
                f"{r['other_over_bound']:.2f}x",
                r["mixer"],
            ]
        else:
            extra = ["", "", "", ""]
        note = " (compile fell back to eager)" if r.get("compile_fell_back") else ""
        lines.append(
            f"| {r['config']}{note} | {r['images_per_s']:.0f} | {share:.0%} | "
            + " | ".join(extra)
            + " |"
        )
    if fused:
        lines += ["", "One EDM step on the state, against its memory bound (3.5 copies):", ""]
        lines += ["| mixer | seconds | min / bound | median / bound |", "|---|---|---|---|"]
        for f in fused:
            if "skipped" in f:
                lines.append(f"| {f['kernel']} | skipped ({f['skipped']}) | | |")
            else:
                lines.append(
                    f"| {f['kernel']} | {f['step_s']:.4f} | {f['min_over_bound']:.2f}x | "
                    f"{f['median_over_bound']:.2f}x |"
                )
    if e2e:
        lines += ["", "`reproduce fig3`, end to end (second epoch, evaluation and checkpoint "
                  "included):", ""]  # fmt: skip
        lines += ["| runs | backend | epoch seconds | images/s |", "|---|---|---|---|"]
        for e in e2e:
            if "skipped" in e:
                lines.append(f"| {e['runs']} | skipped ({e['skipped']}) | | |")
            else:
                lines.append(
                    f"| {e['runs']} | {e['backend']} | {e['epoch_s']:.2f} | "
                    f"{e['images_per_s']:.0f} |"
                )
    projection = meta["projection"]
    if projection["hours"] is not None:
        lines += [
            "",
            f"Projected Figures 3 + 4 ({METHODS} methods x {RUNS} runs x "
            f"{projection['epochs_fig3_plus_fig4']} epochs, evaluating every epoch) from "
            f"{projection['from']}: **{projection['hours']:.2f} hours**.",
        ]
    elif tiny:
        lines += ["", "Tiny mode: no projection (a small model, not the study's)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
