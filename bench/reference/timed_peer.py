"""Run one peer tool's full per-trace work once, for benchmarks. Runs inside /opt/refvenv.

    timed_peer.py tbprof FILE    torch-tb-profiler 0.4.3, what one loader worker + every per-worker route does
    timed_peer.py hta DIR|FILE   HolisticTraceAnalysis: TraceAnalysis + temporal and GPU-kernel breakdowns

Prints one JSON line: {"tool": ..., "wall_s": ..., "import_s": ..., "phases_s": {...}, ...}.
``wall_s`` is measured in-process from the first line of this script (imports included) to the end of the
work; the benchmark runner wraps this script in ``/usr/bin/time -v`` for whole-process wall time and peak
RSS, so this stays a plain script: no threads, no subprocesses, no warm-up, one run.

tbprof, in one process (the plugin itself spawns one process per file; see peers-bench.md):
  1. ``RunProfileData.parse`` (read, gunzip, ``json.loads``, events, op tree, overall / GPU-metrics /
     tensor-core / kernel / memory parsers, ``analyze``), ``RunGenerator.generate_run_profile``,
     ``DistributedRunProfileData`` - exactly ``RunLoader._process_data``;
  2. the body of each per-worker route, serialised with the plugin's own
     ``TorchProfilerPlugin.respond_as_json`` (json.dumps, + gzip level 1 where the route compresses):
     overview, operation pie / table / every call-stack table (both groupings), kernel pie / table /
     op table / tensor-core pie, memory stats / curve / events, module view, operator tree, and the trace
     view (read the file, gunzip, append the GPU-metric counters, gzip level 1; CPU-only: raw file).
  ``--categories kineto-main`` applies the same category changes as tbprof_dump.py.

hta: ``TraceAnalysis(trace_dir=DIR)`` then ``get_temporal_breakdown(visualize=False)`` and
``get_gpu_kernel_breakdown(visualize=False)``. Given a FILE instead of a directory, a temporary directory
holding a symlink to it is used (HTA reads every trace in the directory it is given).
"""

import time

_T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402


def _phase(phases: dict, name: str, start: float) -> float:
    now = time.perf_counter()
    phases[name] = round(now - start, 4)
    return now


def run_tbprof(path: str, categories: str) -> dict:
    import gzip
    import logging

    from torch_tb_profiler import consts
    from torch_tb_profiler import io as tb_io
    from torch_tb_profiler.plugin import TorchProfilerPlugin
    from torch_tb_profiler.profiler.data import DistributedRunProfileData, RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from tbprof_dump import use_kineto_main_categories, worker_and_span

    logging.getLogger(consts.PLUGIN_NAME).setLevel(logging.ERROR)
    if categories == "kineto-main":
        use_kineto_main_categories()
    import_s = time.perf_counter() - _T0

    phases: dict = {}
    respond = TorchProfilerPlugin.respond_as_json
    worker, _, span = worker_and_span(path)
    payload_bytes = 0
    with tempfile.TemporaryDirectory(prefix="timed_peer_") as cache_dir:
        t = time.perf_counter()
        data = RunProfileData.parse(worker, span, path, cache_dir)
        t = _phase(phases, "parse", t)
        profile = RunGenerator(worker, span, data).generate_run_profile()
        DistributedRunProfileData(data)
        t = _phase(phases, "generate", t)

        responses = []
        overview = profile.overview
        is_gpu_used = profile.has_runtime or profile.has_kernel or profile.has_memcpy_or_memset
        overview["environments"] = [
            {"title": "Number of Worker(s)", "value": "1"},
            {"title": "Device Type", "value": "GPU" if is_gpu_used else "CPU"},
        ]
        if profile.gpu_summary and profile.gpu_tooltip:
            overview["gpu_metrics"] = {
                "title": "GPU Summary",
                "data": profile.gpu_summary,
                "tooltip": profile.gpu_tooltip,
            }
        responses.append(respond(overview))
        for pie, table, stacks in (
            (profile.operation_pie_by_name, profile.operation_table_by_name, profile.operation_stack_by_name),
            (
                profile.operation_pie_by_name_input,
                profile.operation_table_by_name_input,
                profile.operation_stack_by_name_input,
            ),
        ):
            responses.append(respond(pie))
            responses.append(respond(table))
            responses.extend(respond(stack) for stack in stacks.values())
        if profile.has_kernel:
            for payload in (
                profile.kernel_pie,
                profile.kernel_table,
                profile.kernel_op_table,
                profile.tc_pie,
            ):
                responses.append(respond(payload))
        if profile.memory_snapshot:
            responses.append(respond(profile.get_memory_stats(memory_metric="KB"), True))
            responses.append(respond(profile.get_memory_curve(time_metric="ms", memory_metric="MB"), True))
            responses.append(respond(profile.get_memory_events(time_metric="ms", memory_metric="KB"), True))
        module_view = profile.get_module_view()
        if module_view:
            responses.append(respond(module_view, True))
        responses.append(respond(profile.get_operator_tree(), True))
        payload_bytes += sum(len(r.get_data()) for r in responses)
        t = _phase(phases, "views", t)

        # trace_route: CPU-only traces are served as stored; otherwise counters are appended and re-gzipped.
        raw = tb_io.read(profile.trace_file_path)
        if not profile.has_kernel:
            if not profile.trace_file_path.endswith(".gz"):
                raw = gzip.compress(raw, 1)
        else:
            if profile.trace_file_path.endswith(".gz"):
                raw = gzip.decompress(raw)
            raw = profile.append_gpu_metrics(raw)
        payload_bytes += len(raw)
        _phase(phases, "trace_view", t)

    return {
        "tool": "torch-tb-profiler",
        "import_s": round(import_s, 4),
        "phases_s": phases,
        "steps": len(data.steps_names),
        "payload_bytes": payload_bytes,
    }


def run_hta(path: str) -> dict:
    from hta.trace_analysis import TraceAnalysis

    import_s = time.perf_counter() - _T0
    phases: dict = {}
    with tempfile.TemporaryDirectory(prefix="timed_peer_hta_") as link_dir:
        trace_dir = path
        if os.path.isfile(path):
            os.symlink(os.path.abspath(path), os.path.join(link_dir, os.path.basename(path)))
            trace_dir = link_dir
        t = time.perf_counter()
        analysis = TraceAnalysis(trace_dir=trace_dir)
        t = _phase(phases, "trace_analysis", t)
        temporal = analysis.get_temporal_breakdown(visualize=False)
        t = _phase(phases, "temporal_breakdown", t)
        kernel_type, kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
        _phase(phases, "gpu_kernel_breakdown", t)
    return {
        "tool": "hta",
        "import_s": round(import_s, 4),
        "phases_s": phases,
        "ranks": len(temporal),
        "kernel_rows": len(kernels),
        "kernel_type_rows": len(kernel_type),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time one peer tool on one trace (see module docstring).")
    parser.add_argument("tool", choices=("tbprof", "hta"))
    parser.add_argument("path", help="tbprof: a trace file; hta: a directory of rank traces (or one file)")
    parser.add_argument(
        "--categories",
        choices=("pypi", "kineto-main"),
        default="pypi",
        help="tbprof only: see tbprof_dump.py",
    )
    args = parser.parse_args(argv)
    if not os.path.exists(args.path):
        parser.error(f"no such file or directory: {args.path}")

    result = run_tbprof(args.path, args.categories) if args.tool == "tbprof" else run_hta(args.path)
    result = {
        "tool": result.pop("tool"),
        "wall_s": round(time.perf_counter() - _T0, 4),
        "input": args.path,
        **result,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
