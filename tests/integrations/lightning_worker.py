"""One rank of the Lightning strategy's test (``python -m decentopt launch -n 2 THIS OUT``):
the strategy's parameters against DecentralizedOptimizer's over the same batches, the
validation metric against the agents' mean, and a run resumed from a checkpoint."""

import json
import sys
import warnings
from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.distributed as dist

import decentopt as dopt
from decentopt.integrations.lightning import DecentralizedStrategy

warnings.filterwarnings("ignore")
out = Path(sys.argv[1])
rank = int(__import__("os").environ["RANK"])
g = torch.Generator().manual_seed(rank)  # each agent its own data
x, y = torch.randn(32, 5, generator=g), torch.randn(32, 1, generator=g) + rank
data = torch.utils.data.TensorDataset(x, y)
# two agents that mix partly (a ring of two averages fully: its agents would be replicas)
GRAPH = dopt.topology.from_matrix(torch.tensor([[0.75, 0.25], [0.25, 0.75]]).numpy())


def loader() -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(data, batch_size=8, shuffle=False)


class Regression(pl.LightningModule):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = torch.nn.Linear(5, 1)

    def training_step(self, batch, _):
        xb, yb = batch
        return torch.nn.functional.mse_loss(self.net(xb), yb)

    def validation_step(self, batch, _):
        xb, yb = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(xb), yb), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def trainer(epochs: int) -> pl.Trainer:
    return pl.Trainer(
        strategy=DecentralizedStrategy("edm", topology=GRAPH, beta=0.9),
        accelerator="cpu",
        devices=2,
        max_epochs=epochs,
        use_distributed_sampler=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=str(out),
    )


def params(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


# two epochs under the strategy
module = Regression(seed=rank)  # rank 0's start is broadcast
fit = trainer(2)
fit.fit(module, loader(), loader())
val = float(fit.callback_metrics["val_loss"])

# the same steps with DecentralizedOptimizer, from rank 0's start
torch.manual_seed(0)
reference = torch.nn.Linear(5, 1)
comm = dopt.comm.DistributedCommunicator(GRAPH, timeout=60)
opt = dopt.distributed.DecentralizedOptimizer(
    reference.parameters(), "edm", comm, lr=0.05, beta=0.9
)
for _ in range(2):
    for xb, yb in loader():
        opt.zero_grad()
        torch.nn.functional.mse_loss(reference(xb), yb).backward()
        opt.step()
with torch.no_grad():
    own = torch.tensor(float(torch.nn.functional.mse_loss(module.net(x), y)))
mean = own.clone()
dist.all_reduce(mean)

# one epoch, a checkpoint, and a fresh module resumed from it for the second
first = trainer(1)
half = Regression(seed=rank)
first.fit(half, loader(), loader())
first.save_checkpoint(out / "half.ckpt")
resumed = Regression(seed=100 + rank)  # another start: the checkpoint must replace it
trainer(2).fit(resumed, loader(), loader(), ckpt_path=str(out / "half.ckpt"))

torch.save(
    {
        "strategy": params(module),
        "reference": params(reference),
        "resumed": params(resumed),
        "val": val,
        "mean_val": float(mean) / 2,
        "own_val": float(own),
    },
    out / f"rank{rank}.pt",
)
print(json.dumps({"rank": rank, "done": True}))
