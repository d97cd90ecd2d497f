"""Deep-training throughput: 16 simulated agents of VGG-11 against one model, by backend.

For each configuration, after warm-up, the time of a step split into the
gradient (forward + backward of every agent) and the rest (EDM's arithmetic and
the ring mix), images per second, the non-gradient share of a step, and the
rest against its memory-traffic bound (EDM reads x, psi, m, g and writes x, psi,
m: 3.5 copies of the (n, P) state, measured as copies in the same run). The
ceiling is one model trained alone with plain SGD at the same total batch n·b
and precision. "3 runs x 16 agents" stacks 48 agents in one call: the work a
batch of three runs would do. The projection of the paper's Figures 3 and 4
(8 methods x 3 runs x the presets' epochs x 50,000 images) uses the fastest
stacked configuration.

Data are random tensors of CIFAR-10's shapes and classes (no data set is read),
so the numbers are throughput only. Writes ``OUT/bench_training.json`` and
``OUT/bench_training.md``.

Usage:
  python benchmarks/bench_training.py --device cuda --out results/bench   # an accelerator
  python benchmarks/bench_training.py --device cpu --tiny --out /tmp/b    # a minute on a CPU
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

import decentopt as dopt
from decentopt.comm import SimulatedCommunicator
from decentopt.data import Dataset
from decentopt.models import make_model
from decentopt.perf import keep_freed_memory
from decentopt.problems.neural import NeuralProblem

IMAGES_PER_EPOCH = 50_000


def fake_data(shape: tuple[int, ...], samples: int, device: str) -> Dataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, *shape, generator=g, dtype=torch.float32)
    y = torch.randint(0, 10, (samples,), generator=g)
    return Dataset("random, CIFAR-10 shapes", x, y, x[:10], y[:10], 10)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def copy_seconds(n: int, P: int, device: str, repeats: int = 3) -> float:
    z = torch.randn(n, P, device=device, dtype=torch.float32)
    out = torch.empty_like(z)
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        out.copy_(z)
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def stacked(
    model_name: str,
    shape: tuple[int, ...],
    *,
    agents: int,
    batch: int,
    backend: str,
    precision: str,
    compile: bool,
    device: str,
    steps: int,
) -> dict[str, Any]:
    data = fake_data(shape, agents * batch * 2, device)
    chunks = tuple(np.array_split(np.arange(len(data.y_train)), agents))
    model = make_model(model_name, in_channels=shape[0]).float()
    problem = NeuralProblem(
        model,
        data,
        chunks,
        batch_size=batch,
        backend=backend,
        device=device,
        precision=precision,
        compile=compile,
        channels_last=device.startswith("cuda"),
    )
    comm = SimulatedCommunicator(dopt.topology.ring(agents))
    alg = dopt.algorithms.make("edm", lr=0.01, beta=0.9)
    state = alg.init(problem.initial_point())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # warm-up (and compilation)
            grads, _ = problem.gradient_and_loss(state.x)
            state = alg.step(state, grads, comm)
    compiled = compile and problem.compile  # False when compilation fell back
    t_grad = t_other = 0.0
    for _ in range(steps):
        sync(device)
        t0 = time.perf_counter()
        grads, _ = problem.gradient_and_loss(state.x)
        sync(device)
        t1 = time.perf_counter()
        state = alg.step(state, grads, comm)
        sync(device)
        t_grad += t1 - t0
        t_other += time.perf_counter() - t1
    t_grad, t_other = t_grad / steps, t_other / steps
    bound = 3.5 * copy_seconds(agents, problem.dim, device)
    return {
        "agents": agents,
        "P": problem.dim,
        "grad_s": t_grad,
        "other_s": t_other,
        "images_per_s": agents * batch / (t_grad + t_other),
        "non_gradient_share": t_other / (t_grad + t_other),
        "other_over_bound": t_other / bound,
        "compile_fell_back": compile and not compiled,
        "warnings": [str(w.message).splitlines()[0] for w in caught][:2],
    }


def ceiling(
    model_name: str,
    shape: tuple[int, ...],
    *,
    total_batch: int,
    precision: str,
    device: str,
    steps: int,
) -> dict[str, Any]:
    """One model alone, plain SGD, at the agents' total batch."""
    model = make_model(model_name, in_channels=shape[0]).float().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(total_batch, *shape, generator=g, dtype=torch.float32).to(device)
    y = torch.randint(0, 10, (total_batch,), generator=g).to(device)
    if device.startswith("cuda"):
        x = x.contiguous(memory_format=torch.channels_last)
    bf16 = precision == "bf16"

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    seconds = (time.perf_counter() - t0) / steps
    return {"agents": 1, "images_per_s": total_batch / seconds, "grad_s": seconds}


def study_epochs() -> int:
    """Epochs of the paper's Figures 3 and 4 (the presets), summed."""
    from decentopt.experiments import load_spec

    return sum(load_spec(name).params.epochs for name in ("fig3", "fig4"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tiny", action="store_true", help="small CNN, 4 agents: a quick check")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per configuration")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds; later rows skipped")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled rows")
    parser.add_argument("--no-runs", action="store_true", help="skip the 3 runs x n rows")
    parser.add_argument("--out", type=Path, default=Path("results/bench_training"))
    args = parser.parse_args(argv)
    start = time.monotonic()
    if not args.device.startswith("cuda"):
        keep_freed_memory()  # as training does: freed state blocks are not returned per step
    if args.tiny:
        model_name, shape, agents, batch = "small_cnn", (1, 8, 8), 4, 8
    else:
        model_name, shape, agents, batch = "vgg11", (3, 32, 32), 16, 32
    steps = args.steps or (2 if args.tiny else 5)
    cuda = args.device.startswith("cuda")
    name = torch.cuda.get_device_name(0) if cuda else platform.processor() or "CPU"
    precisions = ["float32", "bf16"]
    configs: list[tuple[str, dict[str, Any]]] = [
        ("loop, float32", {"backend": "loop", "precision": "float32", "compile": False}),
    ]
    for p in precisions:
        configs.append((f"vmap, {p}", {"backend": "vmap", "precision": p, "compile": False}))
    if not args.no_compile:
        configs.append(
            ("vmap, bf16 + compile", {"backend": "vmap", "precision": "bf16", "compile": True})
        )
    rows: list[dict[str, Any]] = []
    for p in precisions:
        row = ceiling(
            model_name,
            shape,
            total_batch=agents * batch,
            precision=p,
            device=args.device,
            steps=steps,
        )
        rows.append({"config": f"ceiling: one model, batch {agents * batch}, {p}", **row})
    for label, kw in configs:
        for stack in (agents,) if args.no_runs else (agents, 3 * agents):
            if time.monotonic() - start > args.budget:
                rows.append({"config": f"{label}, {stack} agents", "skipped": "time budget"})
                continue
            row = stacked(
                model_name, shape, agents=stack, batch=batch, device=args.device, steps=steps, **kw
            )
            who = f"{stack} agents" if stack == agents else f"3 runs x {agents} agents"
            rows.append({"config": f"{label}, {who}", **row})
    best = max(
        (r for r in rows if r.get("agents", 1) > 1 and "images_per_s" in r),
        key=lambda r: r["images_per_s"],
    )
    epochs = study_epochs()
    images = 8 * 3 * epochs * IMAGES_PER_EPOCH
    hours = images / best["images_per_s"] / 3600
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
            "images": images,
            "epochs_fig3_plus_fig4": epochs,
            "best": best["config"],
            "hours": hours,
        },
        "seconds": time.monotonic() - start,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_training.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1)
    )
    ceiling_rate = {r["config"].rsplit(", ", 1)[1]: r["images_per_s"] for r in rows[:2]}
    lines = [
        f"Device: {name} ({args.device}), torch {torch.__version__}; {model_name}, batch "
        f"{batch} per agent, EDM on a ring; data: {meta['data']} (throughput only).",
        "",
        "| configuration | images/s | of the ceiling | non-gradient share | rest / memory bound |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['config']} | skipped ({r['skipped']}) | | | |")
            continue
        prec = "bf16" if "bf16" in r["config"] else "float32"
        share = r["images_per_s"] / ceiling_rate[prec]
        extra = (
            [f"{r['non_gradient_share']:.1%}", f"{r['other_over_bound']:.2f}x"]
            if "non_gradient_share" in r
            else ["", ""]
        )
        note = " (compile fell back to eager)" if r.get("compile_fell_back") else ""
        lines.append(
            f"| {r['config']}{note} | {r['images_per_s']:.0f} | {share:.0%} | "
            + " | ".join(extra)
            + " |"
        )
    lines += [
        "",
        f"Projected Figures 3 + 4 (8 methods x 3 runs x {epochs} epochs x 50,000 images) at "
        f"the best stacked rate ({best['config']}): **{hours:.1f} hours**"
        + (" (tiny mode: a small CNN, not the study's model)." if args.tiny else "."),
    ]
    (args.out / "bench_training.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
