"""Dump torch-tb-profiler 0.4.3's Distributed view numbers for ONE run folder as JSON.

Runs inside /opt/refvenv (see README.md), never in profscope's environment. It does in one process
what the plugin's ``RunLoader`` does for a run (``profiler/loader.py``):

    for each worker file:  data = RunProfileData.parse(worker, span_index, path, cache_dir)
                           dist = DistributedRunProfileData(data)          # carries comm nodes + overlap costs
    per span index:        RunLoader._process_distributed_profiles(dists, span)   # min-duration matching
                           -> DistributedRunGenerator(...).generate_run_profile()

Field provenance (per span, per worker; unrounded, copied from the plugin objects the routes are
built from — the routes themselves truncate the "all" averages to integers):

overlap[step]        ``dist.comm_overlap_costs[i]`` (``OverallParser.StepCommunicationCosts``), turned into the
                     route's four legends exactly as ``DistributedRunGenerator._generate_overlap_graph`` does:
                     [computation - overlap, overlap, communication - overlap, other].
wait[step]           ``dist.step_comm_stats[step]`` as ``_generate_wait_graph``: [data transfer, comm - transfer].
comm_ops[name]       ``dist.total_comm_stats[name]``: calls, total size (bytes), total latency, data transfer.
comm_nodes           every matched comm node: name, step, kernel_ranges, real_time_ranges (µs, the trace's ts).
gpu_info             ``profile.gpu_info`` (the ``/distributed/gpuinfo`` payload).
enabled              False when the plugin disabled the view for the span (counts differ, no comm ...).

Usage: tbprof_distributed_dump.py RUN_DIR [--corpus-root DIR] [--categories pypi|kineto-main]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tbprof_dump import CATEGORY_MODES, _LogCollector, plain, sha256_of, use_kineto_main_categories
from torch_tb_profiler import __version__ as TBPROF_VERSION
from torch_tb_profiler import consts
from torch_tb_profiler.profiler.data import DistributedRunProfileData, RunProfileData
from torch_tb_profiler.profiler.loader import RunLoader


def workers_of(run_dir: str) -> list[tuple[str, int | None, str]]:
    """(worker, 1-based span index, file) as ``RunLoader.load`` derives them (spans sorted as strings)."""
    found: list[tuple[str, str | None, str]] = []
    for name in sorted(os.listdir(run_dir)):
        match = consts.WORKER_PATTERN.match(name)
        if match and os.path.isfile(os.path.join(run_dir, name)):
            found.append((match.group(1), match.group(2)[1:] if match.group(2) else None, name))
    spans: dict[str, list[str]] = {}
    for worker, span, _ in found:
        if span is not None:
            spans.setdefault(worker, []).append(span)
    return [
        (worker, None if span is None else sorted(spans[worker]).index(span) + 1, name) for worker, span, name in found
    ]


def dump_span(loader: RunLoader, dists: list[DistributedRunProfileData]) -> dict[str, Any]:
    profile = loader._process_distributed_profiles(dists, dists[0].span)
    workers: dict[str, Any] = {}
    for dist in dists:
        entry: dict[str, Any] = {
            "file": dist.file,
            "steps": list(dist.steps_names),
            "overlap": {
                name: [
                    plain(c.computation - c.overlap),
                    plain(c.overlap),
                    plain(c.communication - c.overlap),
                    plain(c.other),
                ]
                for name, c in zip(dist.steps_names, dist.comm_overlap_costs, strict=True)
            },
        }
        if profile is not None:
            entry["wait"] = {str(step): [plain(s[1]), plain(s[0] - s[1])] for step, s in dist.step_comm_stats.items()}
            entry["comm_ops"] = {
                name: {
                    "calls": plain(s[0]),
                    "total_bytes": plain(s[1]),
                    "total_latency_us": plain(s[2]),
                    "data_transfer_us": plain(s[3]),
                }
                for name, s in dist.total_comm_stats.items()
            }
            entry["comm_nodes"] = [
                {
                    "name": node.name,
                    "step": node.step_name,
                    "kernel_ranges": [[plain(a), plain(b)] for a, b in node.kernel_ranges],
                    "real_time_ranges": [[plain(a), plain(b)] for a, b in node.real_time_ranges],
                }
                for node in dist.comm_node_list
            ]
        workers[dist.worker] = entry
    return {
        "enabled": profile is not None,
        "gpu_info": None if profile is None else profile.gpu_info,
        "workers": workers,
    }


def dump(run_dir: str) -> dict[str, Any]:
    loader = RunLoader(os.path.basename(run_dir), run_dir, caches=None)
    by_span: dict[str, list[DistributedRunProfileData]] = {}
    with tempfile.TemporaryDirectory(prefix="tbprof_dist_") as cache_dir:
        for worker, span_index, name in workers_of(run_dir):
            data = RunProfileData.parse(worker, span_index, os.path.join(run_dir, name), cache_dir)
            dist = DistributedRunProfileData(data)
            dist.file = name
            by_span.setdefault(str(span_index), []).append(dist)
    return {"spans": {span: dump_span(loader, dists) for span, dists in sorted(by_span.items())}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--corpus-root", default=None)
    parser.add_argument("--categories", choices=CATEGORY_MODES, default="kineto-main")
    args = parser.parse_args(argv)
    collector = _LogCollector()
    plugin_logger = logging.getLogger(consts.PLUGIN_NAME)
    plugin_logger.addHandler(collector)
    plugin_logger.propagate = False
    if args.categories == "kineto-main":
        use_kineto_main_categories()
    run_dir = os.path.abspath(args.run_dir)
    source = os.path.relpath(run_dir, os.path.abspath(args.corpus_root)) if args.corpus_root else run_dir
    files = {name: sha256_of(os.path.join(run_dir, name)) for _, _, name in workers_of(run_dir)}
    document = {
        "tool": "torch-tb-profiler",
        "tool_version": TBPROF_VERSION,
        "categories": args.categories,
        "source": source,
        "sha256": files,
        **dump(run_dir),
        "plugin_log": collector.summary(),
    }
    sys.stdout.write(json.dumps(document, indent=1, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
