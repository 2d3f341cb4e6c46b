"""Record the small CPU traces of tests/data/modules (the Module view's tests), so CI needs no torch.

    .venv/bin/python scripts/record_module_traces.py [out_dir]

Three runs, each one worker, recorded with ``with_modules=True, with_stack=True`` over ``ProfilerStep``s:
- ``nested``: inference of a model with nested modules (Sequential > Block > Attention / MLP > Linear);
- ``training``: training steps with a DataLoader, backward and an SGD optimizer step;
- ``checkpointing``: the same training with each Block under activation checkpointing
  (``torch.utils.checkpoint``), so its forward runs again during backward.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

WIDTH = 32
STEPS = 3


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(WIDTH, WIDTH)
        self.key = nn.Linear(WIDTH, WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.query(x) @ self.key(x).transpose(-1, -2), dim=-1)
        return self.out(weights @ x)


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Block(nn.Module):
    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.attention = Attention()
        self.mlp = Mlp()
        self.checkpointed = checkpointed

    def body(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm(x))
        return x + self.mlp(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.checkpointed and self.training:
            return checkpoint(self.body, x, use_reentrant=False)
        return self.body(x)


class TinyModel(nn.Module):
    def __init__(self, checkpointed: bool = False) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(checkpointed), Block(checkpointed))
        self.head = nn.Linear(WIDTH, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


def _profiler(out_dir: Path, run: str) -> profile:
    """A profiler that writes ``<out_dir>/<run>/worker0.pt.trace.json.gz`` when its active steps end."""
    return profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1),
        on_trace_ready=lambda prof: _save(prof, out_dir / run),
        with_modules=True,
        with_stack=True,  # torch 2.13 writes the nn.Module python_function events only with the Python tracer
        record_shapes=True,
    )


def _save(prof: profile, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    plain = folder / "worker0.pt.trace.json"
    prof.export_chrome_trace(str(plain))
    with plain.open("rb") as source, gzip.open(folder / "worker0.pt.trace.json.gz", "wb", compresslevel=9) as target:
        shutil.copyfileobj(source, target)
    plain.unlink()


def record_inference(out_dir: Path) -> None:
    model = TinyModel().eval()
    inputs = torch.randn(4, 8, WIDTH)
    with torch.no_grad(), _profiler(out_dir, "nested") as prof:
        for _ in range(STEPS + 1):
            model(inputs)
            prof.step()


def record_training(out_dir: Path, run: str, checkpointed: bool) -> None:
    model = TinyModel(checkpointed).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(4 * (STEPS + 1), 8, WIDTH), torch.randint(0, 4, (4 * (STEPS + 1), 8)))
    with _profiler(out_dir, run) as prof:
        for inputs, labels in DataLoader(data, batch_size=4):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), labels.flatten())
            loss.backward()
            optimizer.step()
            prof.step()


def main() -> None:
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "tests/data/modules"
    torch.manual_seed(0)
    torch.set_num_threads(1)
    record_inference(out_dir)
    record_training(out_dir, "training", checkpointed=False)
    record_training(out_dir, "checkpointing", checkpointed=True)


if __name__ == "__main__":
    main()
