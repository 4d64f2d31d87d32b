"""Run under `accelerate launch` by tests/test_distributed.py: the training loop on a deterministic
linear regression that records which items each rank trained on.

    accelerate launch --num_processes 2 --cpu tests/helpers/distributed_toy.py OUT STEPS BATCH [--resume]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from accelerate import PartialState
from torch import nn

from animegamer.training.loop import TrainConfig, train


class Seen(nn.Module):
    """y = w.x, mean squared error, no randomness: the loss depends only on the items of the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(4, 1, bias=False)
        nn.init.zeros_(self.w.weight)
        self.seen: list[int] = []

    def forward(self, batch):
        idx, x, y = batch
        self.seen.extend(int(i) for i in idx)
        loss = (self.w(x).squeeze(-1) - y).pow(2).mean()
        return loss, {}


class Data(torch.utils.data.Dataset):
    def __init__(self, n: int = 64) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, generator=g)
        self.y = self.x @ torch.tensor([1.0, -2.0, 0.5, 3.0])

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return i, self.x[i], self.y[i]


def collate(items):
    return (torch.tensor([i for i, _, _ in items]), torch.stack([x for _, x, _ in items]),
            torch.stack([y for _, _, y in items]))


def main() -> None:
    out, steps, batch = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    resume = "--resume" in sys.argv
    torch.set_num_threads(1)
    model = Seen()
    cfg = TrainConfig(steps=steps, batch_size=batch, lr=0.25, warmup_steps=0, schedule="constant", grad_clip=0,
                      log_every=1, save_every=2, seed=3, progress=False)
    train(model, Data(), collate, cfg, out, resume=resume)
    rank = PartialState().process_index
    (out / f"seen_rank{rank}_to{steps}.json").write_text(json.dumps(model.seen))


if __name__ == "__main__":
    main()
