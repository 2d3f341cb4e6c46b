"""Record CPU traces shaped like ``tests/corpus/generated/`` (needs torch; no GPU): a 2-layer transformer
(TinyGPT) trained under torch.profiler, one process (``tinygpt_cpu``) and DistributedDataParallel over gloo on
4 ranks (``tinygpt_ddp4_gloo``).

The traces in ``tests/corpus/generated/`` were recorded by the profscope project with torch 2.13 on CPU by a
script of this shape; this file was written afterwards from what those traces show (module tree, input
shapes, schedule, annotations, optimizer), so a new recording has the same structure, not the same bytes.
``tests/reference_data`` holds torch-tb-profiler's numbers for the committed files: keep those files, and record
new ones next to them (``--out``) when a test needs something they lack.

    python scripts/record_test_traces.py --out /tmp/traces            # both runs
    python scripts/record_test_traces.py --out /tmp/traces --ranks 0  # the single-process run only
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, TensorDataset

VOCAB, D_MODEL, HEADS, HIDDEN, LAYERS, SEQ, BATCH = 512, 64, 4, 256, 2, 32, 8
WAIT, WARMUP, ACTIVE, REPEAT = 1, 1, 3, 2
STEPS = (WAIT + WARMUP + ACTIVE) * REPEAT + 1  # one more step lets the schedule close the last span


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(D_MODEL)
        self.attn = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True)
        self.ln2 = nn.LayerNorm(D_MODEL)
        self.mlp = nn.Sequential(nn.Linear(D_MODEL, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, D_MODEL))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.blocks = nn.Sequential(*(Block() for _ in range(LAYERS)))
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


def train(out: Path, worker: str, distributed: bool) -> None:
    torch.manual_seed(0)
    model: nn.Module = TinyGPT()
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, VOCAB, (BATCH * STEPS, SEQ + 1), generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(tokens), batch_size=BATCH)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=REPEAT),
        on_trace_ready=tensorboard_trace_handler(str(out), worker_name=worker, use_gzip=True),
        record_shapes=True, profile_memory=True, with_stack=True, with_modules=True, with_flops=True,
    ) as prof:  # fmt: skip
        for (batch,) in loader:
            with record_function("train_step_user_annotation"):
                logits = model(batch[:, :-1])
                loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            prof.step()


def _rank(rank: int, world: int, out: Path) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        train(out, f"rank{rank}", distributed=True)
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="writes OUT/tinygpt_cpu/ and OUT/tinygpt_ddp4_gloo/")
    parser.add_argument("--ranks", type=int, default=4, help="ranks of the DDP run (0: record only the CPU run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    train(args.out / "tinygpt_cpu", "worker0", distributed=False)
    if args.ranks:
        mp.spawn(_rank, args=(args.ranks, args.out / f"tinygpt_ddp{args.ranks}_gloo"), nprocs=args.ranks)


if __name__ == "__main__":
    main()
