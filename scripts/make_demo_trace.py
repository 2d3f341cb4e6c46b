"""Regenerate profscope's built-in demo run: a small, real torch.profiler trace made on CPU.

Why this exists: profscope ships one demo run so that a fresh install has something to show
and so that tests exercise a trace written by the real profiler rather than a hand-made fixture.
This script is the single source of that trace; rerun it (``python scripts/make_demo_trace.py``)
whenever the demo has to change, and commit the result together with any change here.

It trains a tiny model (conv stem + transformer encoder block + 2-layer MLP head) on random
data for a few steps under ``torch.profiler.profile`` with a wait/warmup/active schedule and
writes one gzipped Chrome trace for one worker (``demo``) and one span into
``<out>/demo_run/``. The trace contains ``ProfilerStep#N`` spans, ``cpu_op`` events with
``Input Dims``, ``[memory]`` instant events, ``python_function`` events (with_stack) and
DataLoader ``enumerate(DataLoader)#...__next__`` events.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, TensorDataset

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path("server/profscope/demo/traces")
RUN_NAME = "demo_run"
WORKER_NAME = "demo"
TRACE_GLOB = "*.pt.trace.json.gz"

SEED = 0
IMAGE_SIZE = 8
CHANNELS = 4
NUM_CLASSES = 10
BATCH_SIZE = 8
# wait=1 + warmup=1 + active=3 = 5 profiler steps; one extra step lets the schedule close the span.
WAIT, WARMUP, ACTIVE = 1, 1, 3
NUM_STEPS = WAIT + WARMUP + ACTIVE + 1
# The demo ships inside the package: keep the gzipped trace small.
MAX_BYTES = 400 * 1024


class TinyNet(nn.Module):
    """Conv stem -> one transformer encoder block over the spatial tokens -> 2-layer MLP head."""

    def __init__(self, d_model: int = 16, n_heads: int = 2, hidden: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(CHANNELS, d_model, kernel_size=3, stride=2, padding=1),
            nn.BatchNorm2d(d_model),
            nn.ReLU(),
        )
        self.block = nn.TransformerEncoderLayer(
            d_model=d_model, nhead=n_heads, dim_feedforward=hidden, dropout=0.0, batch_first=True
        )
        self.head = nn.Sequential(
            nn.Linear(d_model, hidden),
            nn.GELU(),
            nn.Linear(hidden, NUM_CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map a batch of images (B, C, H, W) to class logits (B, NUM_CLASSES)."""
        feats = self.stem(x)  # (B, D, H/2, W/2)
        tokens = feats.flatten(2).transpose(1, 2)  # (B, T, D)
        tokens = self.block(tokens)
        return self.head(tokens.mean(dim=1))


def make_loader() -> DataLoader:
    """A deterministic DataLoader over random images and labels, enough batches for every step."""
    n = BATCH_SIZE * NUM_STEPS
    gen = torch.Generator().manual_seed(SEED)
    images = torch.randn(n, CHANNELS, IMAGE_SIZE, IMAGE_SIZE, generator=gen)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    return DataLoader(TensorDataset(images, labels), batch_size=BATCH_SIZE, shuffle=False, num_workers=0)


def resolve_out(out: Path) -> Path:
    """The default output folder is relative to the repo root; an explicit one to the current directory."""
    if out == DEFAULT_OUT:
        return REPO_ROOT / out
    return out.resolve()


def clear_old_traces(run_dir: Path) -> None:
    """Remove earlier traces so the run folder holds exactly one worker and one span."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in run_dir.glob(TRACE_GLOB):
        old.unlink()


def train_and_profile(run_dir: Path) -> None:
    """Train TinyNet for NUM_STEPS steps under torch.profiler, writing the trace into run_dir."""
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    model = TinyNet()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    loader = make_loader()

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(run_dir), worker_name=WORKER_NAME, use_gzip=True),
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
        with_flops=True,
        with_modules=True,
    ) as prof:
        for step, (images, labels) in enumerate(loader):
            if step >= NUM_STEPS:
                break
            with record_function("forward"):
                logits = model(images)
                loss = loss_fn(logits, labels)
            with record_function("backward"):
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
            with record_function("optimizer_step"):
                optimizer.step()
            prof.step()


def summarize(run_dir: Path) -> dict[str, object]:
    """Check the written trace and return its path, size and event counts by category."""
    traces = sorted(run_dir.glob(TRACE_GLOB))
    if len(traces) != 1:
        raise RuntimeError(f"expected exactly one trace in {run_dir}, found {len(traces)}")
    path = traces[0]
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    events = data["traceEvents"]
    by_cat = Counter(str(ev.get("cat", "<none>")) for ev in events)
    names = [str(ev.get("name", "")) for ev in events]
    steps = sorted({name for name in names if name.startswith("ProfilerStep#")})
    size = path.stat().st_size
    checks = {
        f"size under {MAX_BYTES} bytes": size < MAX_BYTES,
        f"{ACTIVE} ProfilerStep# events": len(steps) == ACTIVE,
        "cpu_op with Input Dims": any(
            ev.get("cat") == "cpu_op" and "Input Dims" in ev.get("args", {}) for ev in events
        ),
        "[memory] instant events": "[memory]" in names,
        "python_function events": by_cat["python_function"] > 0,
        "DataLoader __next__ events": any(name.startswith("enumerate(DataLoader)#") for name in names),
    }
    failed = [what for what, ok in checks.items() if not ok]
    if failed:
        raise RuntimeError(f"demo trace {path} is missing: {', '.join(failed)}")
    return {
        "path": str(path),
        "bytes": size,
        "events": len(events),
        "by_cat": dict(by_cat.most_common()),
        "profiler_steps": steps,
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"folder that receives the run folder '{RUN_NAME}/' (default: {DEFAULT_OUT}, from repo root)",
    )
    args = parser.parse_args(argv)

    run_dir = resolve_out(args.out) / RUN_NAME
    clear_old_traces(run_dir)
    train_and_profile(run_dir)
    info = summarize(run_dir)
    print(f"torch {torch.__version__}")
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
