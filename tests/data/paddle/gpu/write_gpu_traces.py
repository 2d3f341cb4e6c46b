"""Write the GPU-shaped Paddle traces of this folder: two ranks of a data-parallel step, times chosen by hand.

The layout follows PaddlePaddle's ``chrometracing_logger.cc`` (the JSON ``export_chrome_tracing``
writes on a CUDA build): host events on ``"<tid>(Python)"`` / ``"<tid>(C++)"`` tracks, ``CudaRuntime``
launches with ``correlation id``, ``Kernel`` / ``Memcpy`` / ``Memset`` events on ``pid`` = device,
``tid`` = stream with their args, ``launch`` flows, ``[memory]`` events on ``Place(gpu:N)``, and the
metadata and ``ExtraInfo`` it writes at the end. Names carry Paddle's ``[x.xxx ms]`` suffix.

Per rank and step (µs from the step start): matmul forward kernel, a host-to-device memcpy, a memset,
a backward kernel, an NCCL all-reduce launched from a ``Communication`` event, and an Adam kernel
that overlaps the all-reduce by 20 µs. Step 2 differs from step 1 only in the forward kernel
(30 µs instead of 50). Rank 1's all-reduce kernel starts 30 µs later. Run from the repository root:

    python tests/data/paddle/gpu/write_gpu_traces.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
EPOCH_US = 1_764_000_000_000_000  # a whole microsecond: the traces' clock


def host(name: str, cat: str, pid: int, tid: str, start: float, end: float, base: float, **args: object) -> dict:
    return {"name": f"{name}[{(end - start) / 1000:.3f} ms]", "pid": pid, "tid": tid,
            "ts": int(EPOCH_US + base + start), "dur": round(end - start, 3), "ph": "X", "cat": cat,
            "cname": "thread_state_runnable",
            "args": {"start_time": f"{start:.3f} us", "end_time": f"{end:.3f} us", **args}}  # fmt: skip


def rank_trace(rank: int) -> dict:
    pid, device, stream = 4100 + rank, rank, 7
    python, cpp = f"{pid}(Python)", f"{pid}(C++)"
    events: list[dict] = []
    memory: dict[int, list[dict]] = {}  # index of the owning host event -> its memory events
    correlation = 0
    allocated = 0

    def launch(start: float, kernel: str, cat: str, k_start: float, k_end: float, **kernel_args: object) -> None:
        nonlocal correlation
        correlation += 1
        events.append(host("cudaLaunchKernel" if cat == "Kernel" else f"cuda{cat}Async", "CudaRuntime", pid, cpp,
                           start, start + 10, 0, **{"correlation id": correlation}))  # fmt: skip
        events.append({"name": "launch", "id": correlation, "pid": pid, "tid": cpp, "ts": int(EPOCH_US + start + 5),
                       "ph": "s", "cat": "async"})  # fmt: skip
        device_args = {"start_time": f"{k_start:.3f} us", "end_time": f"{k_end:.3f} us", "device": device,
                       "context": 1, "stream": stream, "correlation id": correlation, **kernel_args}  # fmt: skip
        events.append({"name": f"{kernel}[{(k_end - k_start) / 1000:.3f} ms]", "pid": device, "tid": stream,
                       "ts": int(EPOCH_US + k_start), "dur": round(k_end - k_start, 3), "ph": "X", "cat": cat,
                       "cname": "rail_animation", "args": device_args})  # fmt: skip
        events.append({"name": "launch", "id": correlation, "pid": device, "tid": stream,
                       "ts": int(EPOCH_US + (k_start + k_end) / 2), "ph": "f", "cat": "async", "bp": "e"})  # fmt: skip

    def kernel_args(grid: list[int], block: list[int]) -> dict:
        return {"registers per thread": 128, "shared memory": 16384, "blocks per SM": 1.25, "warps per SM": 10.0,
                "grid": grid, "block": block, "theoretical achieved occupancy %": 25.0}  # fmt: skip

    def mem(owner: dict, at: float, size: int) -> None:
        nonlocal allocated
        allocated += size
        memory.setdefault(id(owner), []).append({
            "name": "[memory]", "pid": pid, "tid": cpp, "ts": int(EPOCH_US + at), "ph": "i",
            "cat": "Allocate" if size > 0 else "Free",
            "args": {"place": f"Place(gpu:{device})", "addr": str(140_000_000_000 + rank), "increase_bytes": size,
                     "current_allocated": allocated, "current_reserved": 1 << 20, "peak_allocated": 4096,
                     "peak_reserved": 1 << 20}})  # fmt: skip

    for step in range(2):
        t0 = 1000.0 * step
        forward_kernel_us = 50 if step == 0 else 30
        events.append(host(f"ProfileStep#{step}", "ProfileStep", pid, python, t0, t0 + 1000, 0))
        events.append(host("MLP", "Forward", pid, python, t0 + 10, t0 + 400, 0))
        matmul = host("matmul dygraph", "Operator", pid, cpp, t0 + 20, t0 + 120, 0,
                      input_shapes={"X": [[64, 128]], "Y": [[128, 256]]},
                      input_dtypes={"X": ["float32"], "Y": ["float32"]}, callstack="train.py(42): forward")  # fmt: skip
        events.append(matmul)
        mem(matmul, t0 + 25, 4096)
        events.append(host("matmul kernel launch", "DygraphKernelLaunch", pid, cpp, t0 + 30, t0 + 110, 0))
        launch(t0 + 40, "volta_sgemm_128x64_nn", "Kernel", t0 + 100, t0 + 100 + forward_kernel_us,
               **kernel_args([2, 4, 1], [256, 1, 1]))  # fmt: skip
        events.append(host("copy_to dygraph", "Operator", pid, cpp, t0 + 130, t0 + 200, 0))
        launch(t0 + 140, "Memcpy HtoD (Pageable -> Device)", "Memcpy", t0 + 160, t0 + 170,
               bytes=4096, **{"memory bandwidth (GB/s)": 0.41})  # fmt: skip
        events.append(host("full dygraph", "Operator", pid, cpp, t0 + 210, t0 + 260, 0))
        launch(t0 + 220, "Memset (Device)", "Memset", t0 + 230, t0 + 234, bytes=1024, value=0)
        events.append(host("Gradient Backward", "Backward", pid, python, t0 + 410, t0 + 700, 0))
        events.append(host("matmul_grad dygraph", "Operator", pid, cpp, t0 + 415, t0 + 690, 0))
        launch(t0 + 420, "volta_sgemm_128x64_nt", "Kernel", t0 + 440, t0 + 470, **kernel_args([4, 4, 1], [256, 1, 1]))
        events.append(host("ProcessGroupNCCL::AllReduce", "Communication", pid, cpp, t0 + 710, t0 + 760, 0))
        nccl_start = t0 + 730 + 30 * rank
        launch(t0 + 720, "ncclKernel_AllReduce_RING_LL_Sum_float", "Kernel", nccl_start, t0 + 900,
               **kernel_args([1, 1, 1], [640, 1, 1]))  # fmt: skip
        events.append(host("Optimization Step", "Optimization", pid, python, t0 + 770, t0 + 990, 0))
        adam = host("adam_ dygraph", "Operator", pid, cpp, t0 + 780, t0 + 880, 0)
        events.append(adam)
        mem(adam, t0 + 875, -4096)
        launch(t0 + 790, "adam_kernel", "Kernel", t0 + 850, t0 + 870, **kernel_args([1, 1, 1], [128, 1, 1]))
    ordered = []
    for event in events:  # Paddle writes a host event's memory events right after it
        ordered.append(event)
        ordered.extend(memory.get(id(event), []))
    names = {python: f"thread {pid}:MainThread(Python)", cpp: f"thread {pid}:MainThread(C++)"}
    metadata = [
        *[{"name": "thread_name", "pid": pid, "tid": t, "ph": "M", "args": {"name": n}} for t, n in names.items()],
        {"name": "process_name", "pid": pid, "tid": python, "ph": "M", "args": {"name": f"Process {pid} (CPU)"}},
        {"name": "process_name", "pid": pid, "tid": cpp, "ph": "M", "args": {"name": f"Process {pid} (CPU)"}},
        {"name": "process_name", "pid": device, "tid": stream, "ph": "M", "args": {"name": f"Deivce {device} (GPU)"}},
        {"name": "thread_name", "pid": device, "tid": stream, "ph": "M", "args": {"name": f"stream {stream}"}},
    ]  # fmt: skip
    return {
        "schemaVersion": "1.0.2",
        "displayTimeUnit": "ms",
        "span_index": "0",
        "deviceProperties": [
            {
                "id": device,
                "name": "Tesla V100-SXM2-32GB",
                "totalGlobalMem": 34089730048,
                "computeMajor": 7,
                "computeMinor": 0,
                "maxThreadsPerBlock": 1024,
                "maxThreadsPerMultiprocessor": 2048,
                "regsPerBlock": 65536,
                "regsPerMultiprocessor": 65536,
                "warpSize": 32,
                "sharedMemPerBlock": 49152,
                "sharedMemPerMultiprocessor": 98304,
                "smCount": 80,
                "sharedMemPerBlockOptin": 98304,
            }
        ],
        "traceEvents": [*ordered, *metadata, {}],
        "ExtraInfo": {str(pid): "MainThread", "Process Cpu Utilization": "0.9", "System Cpu Utilization": "0.5"},
    }


def main() -> None:
    for rank in range(2):
        # the name export_chrome_tracing(dir, worker_name=f"rank{rank}") gives: the Distributed view takes
        # traces as ranks of one job by a rank in their names (Paddle's traces record no distributedInfo)
        name = f"rank{rank}_time_2025_11_20_10_00_00_00000{rank}.paddle_trace.json"
        (HERE / name).write_text(json.dumps(rank_trace(rank), indent=1) + "\n")


if __name__ == "__main__":
    main()
