"""Record small real PaddlePaddle (CPU) profiles for the tests: Chrome traces plus Profiler.summary().

Each model is trained for a few steps under ``paddle.profiler.Profiler`` with one recording window
(so the printed summary and the exported trace describe the same steps), with ``record_shapes``,
``profile_memory``, ``RecordEvent`` user ranges and a ``DataLoader`` with worker processes. Written
next to each trace: ``<trace name>.summary_ms.txt`` and ``<trace name>.summary_us.txt``, what
``Profiler.summary()`` printed with that time unit. The traces are gzipped to keep the repository small.

``two_ranks`` is a data-parallel job of two CPU ranks (gloo) started by ``python -m paddle.distributed.launch
--nproc_per_node 2``, each rank profiled and exported with Paddle's default file names, as users get them;
``two_jobs`` is the same training run twice, one process after the other, as single-process jobs: two
unrelated traces in one folder.

    pip install paddlepaddle==3.3.1
    python scripts/record_paddle_profiles.py tests/data/paddle
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import paddle
import paddle.distributed as dist
import paddle.profiler as profiler
from paddle import nn
from paddle.io import DataLoader, Dataset

SEED = 15
BATCH = 8
WAIT_STEPS, RECORD_STEPS = 1, 3  # the first step warms up; three recorded steps make the averages mean something


class RandomSamples(Dataset):
    """Fixed random samples (features, label), made up front so the workers only index them."""

    def __init__(self, count: int, shape: tuple[int, ...], classes: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.features = rng.standard_normal((count, *shape)).astype("float32")
        self.labels = rng.integers(0, classes, size=(count, 1)).astype("int64")

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return self.features[index], self.labels[index]

    def __len__(self) -> int:
        return len(self.labels)


class MLP(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.layers(x)


class SmallCNN(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2D(3, 8, 3, padding=1),
            nn.BatchNorm2D(8),
            nn.ReLU(),
            nn.MaxPool2D(2),
            nn.Conv2D(8, 16, 3, padding=1),
            nn.BatchNorm2D(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2D(1),
        )
        self.head = nn.Linear(16, 10)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.head(paddle.flatten(self.features(x), 1))


class TinyTransformer(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 32)
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(32, 10)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.head(self.encoder(self.embed(x)).mean(axis=1))


MODELS: dict[str, tuple[Callable[[], nn.Layer], tuple[int, ...]]] = {
    "mlp": (MLP, (64,)),
    "cnn_bn": (SmallCNN, (3, 16, 16)),
    "transformer": (TinyTransformer, (12, 16)),
}


def record(name: str, out_dir: Path) -> Path:
    """Train ``name`` for a few steps under the profiler; the trace path it wrote."""
    paddle.seed(SEED)
    make_model, shape = MODELS[name]
    model = make_model()
    optimizer = paddle.optimizer.Adam(learning_rate=1e-3, parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    steps = WAIT_STEPS + RECORD_STEPS
    loader = DataLoader(RandomSamples(BATCH * steps, shape, 10, SEED), batch_size=BATCH, num_workers=2)
    trace_dir = out_dir / name
    trace_dir.mkdir(parents=True, exist_ok=True)
    prof = profiler.Profiler(
        targets=[profiler.ProfilerTarget.CPU],
        scheduler=profiler.make_scheduler(closed=0, ready=WAIT_STEPS, record=RECORD_STEPS, repeat=1),
        on_trace_ready=profiler.export_chrome_tracing(str(trace_dir)),  # Paddle's own file name
        record_shapes=True,
        profile_memory=True,
    )
    prof.start()
    for features, labels in loader:
        with profiler.RecordEvent("forward_and_loss"):
            loss = loss_fn(model(features), labels)
        with profiler.RecordEvent("backward_and_update"):
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
        prof.step(num_samples=BATCH)
    prof.stop()
    return _save_summaries(prof, name, trace_dir)


def record_static(name: str, out_dir: Path) -> Path:
    """A static-graph MLP run by the executor: multi-threaded, ``StaticKernelLaunch`` events."""
    paddle.enable_static()
    try:
        main_program, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main_program, startup):
            features = paddle.static.data("features", [BATCH, 64], "float32")
            labels = paddle.static.data("labels", [BATCH, 1], "int64")
            hidden = paddle.nn.functional.relu(paddle.static.nn.fc(features, 32))
            loss = paddle.nn.functional.cross_entropy(paddle.static.nn.fc(hidden, 10), labels).mean()
            paddle.optimizer.SGD(learning_rate=0.01).minimize(loss)
        executor = paddle.static.Executor(paddle.CPUPlace())
        executor.run(startup)
        samples = RandomSamples(BATCH, (64,), 10, SEED)
        feed = {"features": samples.features, "labels": samples.labels}
        trace_dir = out_dir / name
        trace_dir.mkdir(parents=True, exist_ok=True)
        prof = profiler.Profiler(
            targets=[profiler.ProfilerTarget.CPU],
            scheduler=profiler.make_scheduler(closed=0, ready=WAIT_STEPS, record=RECORD_STEPS, repeat=1),
            on_trace_ready=profiler.export_chrome_tracing(str(trace_dir)),
            record_shapes=True,
            profile_memory=True,
        )
        prof.start()
        for _ in range(WAIT_STEPS + RECORD_STEPS):
            with profiler.RecordEvent("executor_run"):
                executor.run(main_program, feed=feed, fetch_list=[loss])
            prof.step(num_samples=BATCH)
        prof.stop()
        return _save_summaries(prof, name, trace_dir)
    finally:
        paddle.disable_static()


def record_data_parallel_rank(trace_dir: Path) -> None:
    """One rank of the ``two_ranks`` job (or a single-process run when not started by the launcher).

    Paddle 3.3.1 leaves no event in a CPU trace for ``paddle.distributed.all_reduce`` or for the
    gradient all-reduce of ``DataParallel`` (both call the gloo ProcessGroup directly). The all-reduce
    of the loss below calls the phi ``all_reduce`` operator (what a static-graph program runs), which
    the profiler records as an ``all_reduce dygraph`` operator: the collective the traces show.
    """
    paddle.set_device("cpu")
    distributed = int(os.environ.get("PADDLE_TRAINERS_NUM", "1")) > 1
    if distributed:
        dist.init_parallel_env()
    rank = dist.get_rank() if distributed else 0
    paddle.seed(SEED)
    model = paddle.DataParallel(MLP()) if distributed else MLP()
    optimizer = paddle.optimizer.SGD(learning_rate=1e-2, parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    samples = RandomSamples(BATCH * (WAIT_STEPS + RECORD_STEPS), (64,), 10, SEED + rank)
    trace_dir.mkdir(parents=True, exist_ok=True)
    prof = profiler.Profiler(
        targets=[profiler.ProfilerTarget.CPU],
        scheduler=profiler.make_scheduler(closed=0, ready=WAIT_STEPS, record=RECORD_STEPS, repeat=1),
        on_trace_ready=profiler.export_chrome_tracing(str(trace_dir)),  # default names: host_{host}pid_{pid}
    )
    prof.start()
    for step in range(WAIT_STEPS + RECORD_STEPS):
        batch = slice(step * BATCH, (step + 1) * BATCH)
        features, labels = paddle.to_tensor(samples.features[batch]), paddle.to_tensor(samples.labels[batch])
        loss = loss_fn(model(features), labels)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        if distributed:
            paddle._C_ops.all_reduce(loss.detach().reshape([1]), 0, 0)  # ring 0, sum: the mean loss to log
        prof.step(num_samples=BATCH)
    prof.stop()


def record_two_ranks(out_dir: Path) -> list[Path]:
    """The ``two_ranks`` job: this script's ``--rank-worker`` run on two ranks by Paddle's launcher."""
    trace_dir = _empty_folder(out_dir / "two_ranks")
    with tempfile.TemporaryDirectory() as log_dir:
        launch = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir", log_dir]
        subprocess.run([*launch, __file__, "--rank-worker", str(trace_dir)], check=True)
    return _gzip_new_traces(trace_dir)


def record_two_jobs(out_dir: Path) -> list[Path]:
    """The ``two_jobs`` folder: two single-process runs, one after the other."""
    trace_dir = _empty_folder(out_dir / "two_jobs")
    for _ in range(2):
        subprocess.run([sys.executable, __file__, "--rank-worker", str(trace_dir)], check=True)
    return _gzip_new_traces(trace_dir)


def _empty_folder(trace_dir: Path) -> Path:
    """A run folder of several processes' traces must hold only this recording's: refuse an earlier one's."""
    if any(trace_dir.glob("*.paddle_trace.json*")):
        raise RuntimeError(f"{trace_dir} already holds traces: remove them first (they would join this run)")
    return trace_dir


def _gzip_new_traces(trace_dir: Path) -> list[Path]:
    return [gzip_in_place(trace) for trace in sorted(trace_dir.glob("*.paddle_trace.json"))]


def _save_summaries(prof: profiler.Profiler, name: str, trace_dir: Path) -> Path:
    traces = sorted(trace_dir.glob("*.paddle_trace.json"))
    if len(traces) != 1:
        raise RuntimeError(f"{name}: expected one trace in {trace_dir}, found {traces}")
    for unit in ("ms", "us"):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            prof.summary(sorted_by=profiler.SortedKeys.CPUTotal, op_detail=True, time_unit=unit)
        Path(f"{traces[0]}.summary_{unit}.txt").write_text(printed.getvalue())
    return traces[0]


def gzip_in_place(path: Path) -> Path:
    target = path.with_name(path.name + ".gz")
    with open(path, "rb") as raw, gzip.GzipFile(target, "wb", mtime=0) as packed:
        shutil.copyfileobj(raw, packed)
    path.unlink()
    return target


MULTI_PROCESS: dict[str, Callable[[Path], list[Path]]] = {"two_ranks": record_two_ranks, "two_jobs": record_two_jobs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--models", nargs="*", default=[*MODELS, "static_mlp", *MULTI_PROCESS])
    parser.add_argument("--rank-worker", action="store_true", help="(internal) one rank of two_ranks / two_jobs")
    args = parser.parse_args()
    if args.rank_worker:
        record_data_parallel_rank(args.out_dir)
        return
    paddle.set_device("cpu")
    for name in args.models:
        if name in MULTI_PROCESS:
            for trace in MULTI_PROCESS[name](args.out_dir):
                print(f"{name}: {trace} ({paddle.__version__})")
            continue
        trace = record_static(name, args.out_dir) if name == "static_mlp" else record(name, args.out_dir)
        print(f"{name}: {gzip_in_place(trace)} ({paddle.__version__})")


if __name__ == "__main__":
    main()
