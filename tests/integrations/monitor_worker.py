"""One rank of the monitor's test: EDM on a small net, each rank's loss logged by the monitor
and written down by the rank itself (``python -m decentopt launch -n 2 THIS OUT``)."""

import json
import sys
from pathlib import Path

import torch

import decentopt as dopt
from decentopt.integrations.monitor import Monitor

out = Path(sys.argv[1])
rank, world = dopt.distributed.init()
torch.manual_seed(0)
model = torch.nn.Linear(5, 1)
comm = dopt.comm.DistributedCommunicator(dopt.topology.ring(world), timeout=60)
opt = dopt.distributed.DecentralizedOptimizer(model.parameters(), "edm", comm, lr=0.1, beta=0.9)
g = torch.Generator().manual_seed(rank)
x, y = torch.randn(32, 5, generator=g), torch.randn(32, 1, generator=g) + rank
progress = out / f"progress-rank{rank}.txt"
monitor = Monitor(
    [f"jsonl:{out / 'lines'}", f"tensorboard:{out / 'tb'}"],
    log_every=4,
    total=10,
    name="edm",
    say=lambda line: progress.open("a").write(line + "\n"),
)
mine = []
for _ in range(10):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    norm = float(sum(p.detach().pow(2).sum() for p in model.parameters()))
    mine.append({"loss": loss.item(), "norm": norm})
    monitor.step(loss=loss, norm=norm)
monitor.close()
(out / f"rank{rank}.json").write_text(json.dumps(mine))
dopt.distributed.finalize()
