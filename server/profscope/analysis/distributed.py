"""Distributed view: every rank of a job side by side, built from small per-rank summaries.

Scale (issue #5 item 6): each rank is parsed on its own in the ingest pool, and ``rank_summary.py``
(the cached query ``distributed.rank``) reduces it to a summary of a few kilobytes per collective
call. This module, at request time (:func:`build_distributed`), reads only those summaries, never the
ranks' events, so a 64-rank job costs 64 small JSON files.

Definitions (``docs/definitions.md`` §6: torch-tb-profiler's Distributed view and HTA):

- **Collective calls** of a rank: on a GPU rank, every communication kernel (NCCL / RCCL / HCCL /
  UCC / MSCCL kernels, custom all-reduce kernels, and any kernel launched by a collective op), plus
  ``gloo:*`` host ops (Gloo runs on the CPU); on a CPU-only rank, the backend's host records of the
  collective (``gloo:*``, ``nccl:*``, ``mpi:*``, ``ucc:*`` ...). Each call takes its name, process
  group, sequence number and size from its own collective args or from the ops that launched it
  (``record_param_comms``, ``nccl:*``, ``c10d::*``).
- **Computation / Overlapping / Communication / Other** per step (torch-tb-profiler's
  ``OverallParser.aggregate``): computation = the union of compute kernels (communication kernels
  excluded) in the step, or, on a rank without kernels, of host ops (other than collectives, data
  loading and steps); communication = the union of the rank's collective calls; overlapping = their
  intersection (on a rank without kernels a thread inside a collective is not computing, so the
  ops around the collective on that thread are not computation then: ``_host_computation``);
  the view shows computation − overlap, overlap, communication − overlap, and other
  = step − the rest. The plugin also counted the host ``nccl:*`` enqueue ops as communication on
  GPU ranks; here a GPU rank's communication is what runs on the device.
- **Data transfer vs synchronizing** (torch-tb-profiler's ``_process_distributed_profiles``): the
  transfer time of a collective call is the minimum duration of that same call across the ranks
  that made it; each rank's transfer range is ``[end − min duration, end]``; synchronizing time =
  communication − transfer (time spent waiting for the other ranks). The plugin matched calls by
  their position in each rank's list and gave up when the counts differed; here calls are matched
  by (process group, sequence number), or, without ``Seq`` args, by (process group, collective
  type, n-th call of that type), and unmatched calls are counted and reported.
- **Stragglers**: for each matched call, every rank's arrival (start on the wall clock) and skew
  (arrival − first arrival); the last to arrive made the others wait Σ (last arrival − arrival).
  Ranks are aligned by absolute time (``baseTimeNanoseconds`` + ``ts``, or epoch ``ts``); when a
  rank has no absolute time they are aligned on the end of the calls they share.
- **HTA analyses** per GPU rank (``hta/analyzers/breakdown_analysis.py``,
  ``communication_analysis.py``; ``docs/definitions.md``, "Temporal breakdown"): device activities
  without a stream are left out, as HTA does; temporal breakdown, all device activity, over [first
  device activity, last end]: idle = window − busy, compute = union of compute kernels,
  non-compute = the rest; the same with HTA's trace filter (only activities launched by a runtime
  call in the trace before the last step's start) as ``temporal_hta_filter``; idle time per
  stream split into host wait (the launch of the next kernel started after the previous kernel
  ended), kernel wait (otherwise, when the gap is under 30 µs — HTA's ``consecutive_kernel_delay``
  default, compared with µs timestamps) and other; communication–computation overlap ratio =
  |COMM ∩ COMP| / |COMM|; kernel type breakdown COMM / COMP / MEM (memcpy, memset, ``dma*``).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from profscope.analysis import intervals
from profscope.analysis.rank_summary import NS_PER_US, SUMMARY_VERSION

# ================================================================================================
# All ranks, at request time: from the summaries only
# ================================================================================================
MAX_COLLECTIVES_LISTED = 50
MAX_TRACE_WORKERS = 8
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_PARALLEL_DIMS = re.compile(r"_(dp|tp|pp|ep|cp|sp|fsdp)(\d+)", re.IGNORECASE)
_NODE_PROCESS = re.compile(r"^(.*)_(\d+)$")  # torch-tb-profiler's NODE_PROCESS_PATTERN (hostname_pid)
_PADDLE_DEFAULT_WORKER = re.compile(r"^host_(?P<host>.*)pid_(?P<pid>\d+)$")  # export_chrome_tracing's name
_GROUP_DIMENSION = re.compile(r"(?:^|[^a-z])(dp_shard|dp_replicate|fsdp|dp|tp|pp|ep|cp|sp)(?:[^a-z]|$)", re.IGNORECASE)


def summary_from_json(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """A cached rank summary with its per-call columns as numpy arrays (compact while many ranks are held)."""
    try:
        summary = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return None, f"its summary is unreadable ({exc})"
    if not isinstance(summary, dict) or "identity" not in summary:
        return None, str(summary.get("error") if isinstance(summary, dict) else "") or "no distributed summary"
    if summary.get("version") != SUMMARY_VERSION:
        return None, "its summary was written by another profscope version: parse it again"
    table = summary["collectives"]
    for column, values in table.items():
        if column not in ("names", "kinds", "dtypes"):
            table[column] = np.asarray(values, dtype=bool if column == "on_device" else np.int64)
    return summary, None


def rank_from_name(worker: str) -> int | None:
    """``rank3``, ``worker3``, ``rank3_dp0_tp1_pp0``, ``sampled_rank-1`` -> the number."""
    found = _RANK_IN_NAME.search(worker)
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class JobRanks:
    """Whether a run's traces are the ranks of one job (``reason`` None) or why not; ``inferred``: each
    worker's rank number when the traces record none and it was inferred (rule 3 of "Ranks of one job")."""

    reason: str | None
    inferred: dict[str, int] = field(default_factory=dict)


def job_ranks(workers: list[str], summaries: Callable[[], list[dict[str, Any] | None]]) -> JobRanks:
    """Whether a run's traces are the ranks of one distributed job (``docs/definitions.md`` §10, "Ranks of
    one job"). ``summaries()``: each worker's first trace's ingest summary (None when not parsed yet), read
    only when the names do not decide.

    1. A distinct rank number in every worker's name (rank3, worker3, sampled_rank-1) makes ranks of one job.
    2. Else distributedInfo decides: one trace of a job with world size > 1 is a rank, and traces whose
       distributedInfo ranks are distinct are ranks of one job.
    3. Else PaddlePaddle traces (which record no rank) are ranks of one job when they come from distinct
       processes and their profiling windows overlap in wall-clock time; numbered by host name, then process id.
    Anything else (one plain trace; several traces with no rank, or the same rank) is unrelated traces.
    """
    named = [rank_from_name(worker) for worker in workers]
    if len(workers) > 1 and None not in named and len(set(named)) == len(named):
        return JobRanks(None)
    parsed = summaries()
    recorded_infos = [s["distributed"] for s in parsed if s and isinstance(s.get("distributed"), dict)]
    recorded_infos = [info for info in recorded_infos if info.get("rank") is not None]
    recorded = [info["rank"] for info in recorded_infos]
    if len(set(recorded)) < len(recorded):
        return JobRanks(f"{len(recorded)} traces record the same distributedInfo rank ({recorded[0]}): "
                        "they are separate jobs, not ranks of one job")  # fmt: skip
    if len(recorded) > 1 or _world_size(recorded_infos) > 1:
        return JobRanks(None)
    if recorded:
        return JobRanks("its trace records distributedInfo with a world size of 1: a single-process job")
    if len(workers) == 1:
        return JobRanks("it has one trace and no distributedInfo: profile a torch.distributed job to compare its ranks")
    paddle = [s for s in parsed if s and s.get("format") == "paddle"]
    if len(workers) > 1 and len(paddle) == len(workers):
        return _concurrent_paddle_processes(workers, paddle)
    return JobRanks(
        f"its {len(workers)} traces record no distributedInfo and their names carry no distinct rank "
        "number (rank0, worker1 ...): they are taken as unrelated traces, not ranks of one job"
    )


def _concurrent_paddle_processes(workers: list[str], summaries: list[dict[str, Any]]) -> JobRanks:
    """Rule 3: Paddle traces of distinct processes whose profiling windows share an instant are ranks of one
    job (``paddle.distributed.launch`` with the default file names), numbered by (host name, process id)."""
    processes = [s.get("process") or {} for s in summaries]
    if any(not p.get("pids") or p.get("start_us") is None or p.get("end_us") is None for p in processes):
        return JobRanks(f"its {len(workers)} PaddlePaddle traces record no rank, and not all of them record "
                        "their process id and profiling window")  # fmt: skip
    identities = [(_host_of(worker), min(p["pids"])) for worker, p in zip(workers, processes, strict=True)]
    if len(set(identities)) < len(identities):
        return JobRanks(f"its {len(workers)} PaddlePaddle traces record no rank and some come from the same "
                        "process: they are separate profiling sessions, not ranks of one job")  # fmt: skip
    if max(p["start_us"] for p in processes) >= min(p["end_us"] for p in processes):
        return JobRanks(f"its {len(workers)} PaddlePaddle traces record no rank and their profiling windows do "
                        "not all overlap in time: they are taken as separate jobs, not ranks of one job")  # fmt: skip
    order = sorted(range(len(workers)), key=lambda i: (*identities[i], workers[i]))
    return JobRanks(None, {workers[i]: number for number, i in enumerate(order)})


def _host_of(worker: str) -> str:
    """The host name in Paddle's default worker name ``host_{hostname}pid_{pid}``; "" for other names."""
    found = _PADDLE_DEFAULT_WORKER.match(worker)
    return found.group("host") if found else ""


def _world_size(infos: list[dict[str, Any] | None]) -> int:
    sizes = [int(info.get("world_size") or 1) for info in infos if isinstance(info, dict)]
    return max(sizes, default=1)


def parallel_dims_from_name(worker: str) -> dict[str, int]:
    """InternLM-style worker folders: ``rank3_dp0_tp1_pp0`` -> {dp: 0, tp: 1, pp: 0}."""
    return {dim.lower(): int(value) for dim, value in _PARALLEL_DIMS.findall(worker)}


def build_distributed(inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The Distributed view of one span from the ranks' summaries.

    ``inputs``: one item per worker, in the catalog's worker order: ``{"worker", "span", "file",
    "summary"}`` with the ``distributed.rank`` payload, or ``{"worker", "span", "file", "error"}``
    when that rank's trace could not be read (it is reported, and the view is built without it); plus
    ``"inferred_rank"`` when ``job_ranks`` inferred the worker's rank number.
    """
    warnings: list[str] = []
    ranks = _assign_ranks(inputs, warnings)
    ready = [r for r in ranks if r["summary"] is not None]
    for position, rank in enumerate(ready):
        rank["position"] = position
    for rank in ranks:
        if rank["summary"] is None:
            warnings.append(f"{rank['worker']} ({rank['file']}) could not be read and is left out: {rank['error']}")
    _check_world(ranks, warnings)
    calls = _flatten_calls(ready)
    alignment = _align_clocks(ready, calls, warnings)
    matched = _match(ready, calls, warnings)
    rank_rows = [_rank_row(rank, calls, matched) for rank in ranks]
    stragglers, collectives = _stragglers(ready, calls, matched, alignment)
    return {
        "ranks": rank_rows,
        "steps": sorted({s["name"] for r in ready for s in r["summary"]["steps"]}, key=_step_sort_key),
        "topology": _topology(ranks),
        "process_groups": _process_groups(ready, calls, matched),
        "op_stats": _op_stats(ready, calls, matched),
        "collectives": collectives,
        "stragglers": stragglers,
        "alignment": alignment,
        "matching": matched["report"],
        "warnings": warnings,
    }


def _step_sort_key(name: str) -> tuple:
    return (0, int(name), name) if name.isascii() and name.isdigit() else (1, 0, name)


def _assign_ranks(inputs: list[dict[str, Any]], warnings: list[str]) -> list[dict[str, Any]]:
    """Rank from ``distributedInfo``, else from the worker's name, else its position (with a warning)."""
    ranks = []
    by_order = []
    for position, item in enumerate(inputs):
        summary = item.get("summary")
        if summary is not None and not isinstance(summary.get("identity"), dict):
            summary = None
            item = {**item, "error": "its distributed summary is unreadable"}
        number, source = (summary["identity"]["rank"], "distributedInfo") if summary else (None, None)
        if number is None and item.get("inferred_rank") is not None:
            number, source = item["inferred_rank"], "inferred"
        if number is None:
            number, source = rank_from_name(item["worker"]), "name"
        if number is None:
            number, source = position, "file order"
            by_order.append(item["worker"])
        ranks.append(
            {
                "worker": item["worker"],
                "span": item.get("span"),
                "file": item.get("file"),
                "rank": number,
                "rank_source": source,
                "parallel": parallel_dims_from_name(item["worker"]),
                "summary": summary,
                "error": item.get("error"),
            }
        )
    inferred = [rank["worker"] for rank in ranks if rank["rank_source"] == "inferred"]
    if inferred:
        warnings.append(
            f"No rank recorded for {', '.join(inferred)}: taken as ranks of one job because they are PaddlePaddle "
            "traces of distinct processes whose profiling windows overlap, and numbered by host name and process id "
            "(inferred, which may not be the job's real rank numbers)."
        )
    if by_order:
        warnings.append(
            f"No rank recorded for {', '.join(by_order)} (no distributedInfo, no rank in the name): "
            "numbered by file order, which may not be the real rank."
        )
    seen: dict[int, list[str]] = defaultdict(list)
    for rank in ranks:
        seen[rank["rank"]].append(rank["worker"])
    for number, workers in sorted(seen.items()):
        if len(workers) > 1:
            warnings.append(f"Rank {number} is claimed by {len(workers)} files ({', '.join(workers)}).")
    ranks.sort(key=lambda r: (r["rank"], r["worker"]))
    for index, rank in enumerate(ranks):
        rank["index"] = index
    return ranks


def _check_world(ranks: list[dict[str, Any]], warnings: list[str]) -> None:
    sizes = {r["summary"]["identity"]["world_size"] for r in ranks if r["summary"]} - {None}
    if len(sizes) > 1:
        warnings.append(f"The ranks disagree on the world size: {sorted(sizes)}.")
    if sizes:
        world = max(sizes)
        present = {r["rank"] for r in ranks}
        missing = [n for n in range(world) if n not in present]
        if missing:
            listed = ", ".join(map(str, missing[:20])) + (" …" if len(missing) > 20 else "")
            warnings.append(
                f"{len(present)} of {world} ranks have a trace in this span; missing: {listed}. "
                "Collectives are matched among the ranks present."
            )


def _flatten_calls(ready: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Every rank's collective calls in one set of arrays, with a global matching key per call."""
    pg_codes: dict[str, int] = {}
    kind_codes: dict[str, int] = {}
    parts: dict[str, list[np.ndarray]] = defaultdict(list)
    for position, rank in enumerate(ready):
        summary = rank["summary"]
        table = summary["collectives"]
        count = len(table["start_ns"])
        groups = summary["process_groups"]
        pg_key = [pg_codes.setdefault(_group_key(g), len(pg_codes)) for g in groups]
        pg = np.asarray(table["pg"], dtype=np.int64)
        pg_code = np.array([pg_key[p] if p >= 0 else pg_codes.setdefault("", len(pg_codes)) for p in pg.tolist()])
        kinds = [kind_codes.setdefault(k, len(kind_codes)) for k in table["kinds"]]
        kind = np.array([kinds[k] for k in table["kind"]], dtype=np.int64)
        seq = np.asarray(table["seq"], dtype=np.int64)
        parts["rank"].append(np.full(count, position, dtype=np.int64))
        parts["pg"].append(pg_code.astype(np.int64).reshape(count))
        parts["pg_local"].append(pg)
        parts["by_seq"].append((seq >= 0).astype(np.int64))
        parts["kind"].append(kind)
        parts["kind_key"].append(np.where(seq >= 0, -1, kind))
        parts["order"].append(np.asarray(table["order"], dtype=np.int64))
        parts["sub"].append(np.asarray(table["sub"], dtype=np.int64))
        parts["start_ns"].append(np.asarray(table["start_ns"], dtype=np.int64))
        parts["end_ns"].append(np.asarray(table["end_ns"], dtype=np.int64))
        parts["bytes"].append(np.asarray(table["bytes"], dtype=np.int64))
        parts["step"].append(np.asarray(table["step"], dtype=np.int64))
        parts["name_local"].append(np.asarray(table["name"], dtype=np.int64))
        parts["event"].append(np.asarray(table["event"], dtype=np.int64))
    calls = {key: np.concatenate(values) if values else np.zeros(0, np.int64) for key, values in parts.items()}
    if not ready:
        calls = {key: np.zeros(0, np.int64) for key in ("rank", "pg", "pg_local", "by_seq", "kind", "kind_key",
                 "order", "sub", "start_ns", "end_ns", "bytes", "step", "name_local", "event")}  # fmt: skip
    calls["kind_names"] = np.array(list(kind_codes) or [""], dtype=object)
    calls["pg_names"] = np.array(list(pg_codes) or [""], dtype=object)
    keys = np.stack([calls["pg"], calls["by_seq"], calls["kind_key"], calls["order"], calls["sub"]], axis=1)
    if len(keys):
        _, inverse = np.unique(keys, axis=0, return_inverse=True)
        calls["key"] = inverse.reshape(-1).astype(np.int64)
    else:
        calls["key"] = np.zeros(0, dtype=np.int64)
    calls["dur_ns"] = calls["end_ns"] - calls["start_ns"]
    return calls


def _group_key(group: dict[str, Any]) -> str:
    """Process groups are named alike on every rank (c10d numbers them in creation order)."""
    return str(group.get("name") or "") or json.dumps(group.get("ranks"))


def _align_clocks(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], warnings: list[str]) -> dict[str, Any]:
    """Offset (µs) of each rank's trace origin on a common time axis."""
    clocks = [r["summary"]["clock"] for r in ready]
    if ready and all(c["base_ns"] is not None for c in clocks):
        reference = min(clocks, key=lambda c: c["base_ns"] / 1000.0 + c["origin_us"])
        offsets = [
            (c["base_ns"] - reference["base_ns"]) / 1000.0 + (c["origin_us"] - reference["origin_us"]) for c in clocks
        ]
        method = "wall clock"
    else:
        offsets, method = _offsets_from_collective_ends(ready, calls, warnings), "collective ends"
        if ready:
            warnings.append(
                "Some traces carry no absolute time (no baseTimeNanoseconds): ranks are aligned on the end of the "
                "collectives they share, so arrival skews are estimates."
            )
    for rank, offset in zip(ready, offsets, strict=True):
        rank["offset_us"] = offset
    spread = None
    if len(calls["key"]):
        end_us = calls["end_ns"] / NS_PER_US + np.array(offsets)[calls["rank"]]
        spread_per_key = _group_max(calls["key"], end_us) - _group_min(calls["key"], end_us)
        shared = np.bincount(calls["key"]) > 1
        if shared.any():
            spread = float(np.median(spread_per_key[shared]))
    return {"method": method, "median_end_spread_us": spread}


def _offsets_from_collective_ends(
    ready: list[dict[str, Any]], calls: dict[str, np.ndarray], warnings: list[str]
) -> list[float]:
    if not ready:
        return []
    counts = np.bincount(calls["rank"], minlength=len(ready)) if len(calls["rank"]) else np.zeros(len(ready), int)
    reference = int(np.argmax(counts))
    ref_mask = calls["rank"] == reference
    ref_end = dict(zip(calls["key"][ref_mask].tolist(), calls["end_ns"][ref_mask].tolist(), strict=True))
    offsets = []
    for position in range(len(ready)):
        mask = calls["rank"] == position
        pairs = zip(calls["key"][mask].tolist(), calls["end_ns"][mask].tolist(), strict=True)
        diffs = [ref_end[k] - end for k, end in pairs if k in ref_end]
        if diffs:
            offsets.append(float(np.median(diffs)) / NS_PER_US)
        else:
            offsets.append(0.0)
            if position != reference:
                warnings.append(
                    f"{ready[position]['worker']} shares no collective with the others: it cannot be aligned."
                )
    return offsets


def _group_min(key: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.full(int(key.max()) + 1 if len(key) else 0, np.inf)
    np.minimum.at(out, key, values)
    return out


def _group_max(key: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.full(int(key.max()) + 1 if len(key) else 0, -np.inf)
    np.maximum.at(out, key, values)
    return out


def _match(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], warnings: list[str]) -> dict[str, Any]:
    """Per call: the minimum duration of the same call across ranks (its data transfer time)."""
    key = calls["key"]
    keys = int(key.max()) + 1 if len(key) else 0
    present = np.bincount(key, minlength=keys) if keys else np.zeros(0, dtype=np.int64)
    min_dur = np.full(keys, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(min_dur, key, calls["dur_ns"])
    expected = _expected_participants(ready, calls, keys)
    report: dict[str, Any] = {"calls": len(key), "collectives": keys, "ranks": len(ready)}
    if keys:
        complete = present >= expected
        report["complete"] = int(complete.sum())
        report["partial"] = int((~complete & (present > 1)).sum())
        report["single"] = int((~complete & (present == 1)).sum())
        per_rank_missing = []
        for position, rank in enumerate(ready):
            mine = np.zeros(keys, dtype=bool)
            mine[key[calls["rank"] == position]] = True
            lonely = int((mine & (present == 1) & (expected > 1)).sum())
            if lonely:
                per_rank_missing.append(f"{rank['worker']}: {lonely} call(s) no other rank made")
        if report["partial"] or report["single"]:
            detail = "; ".join(per_rank_missing[:10])
            warnings.append(
                f"{report['complete']} of {keys} collectives were found on every rank of their group; "
                f"{report['partial']} on only some ranks and {report['single']} on one rank only"
                + (f" ({detail})" if detail else "")
                + ". Unmatched calls count as all data transfer (no synchronizing time can be measured)."
            )
        mismatched = _size_mismatches(calls, keys)
        if mismatched:
            warnings.append(
                f"{mismatched} matched collective(s) have different sizes on different ranks "
                "(expected for all-to-all and uneven splits; otherwise the calls may be mis-paired)."
            )
    return {"present": present, "min_dur": min_dur, "expected": expected, "report": report}


def _expected_participants(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], keys: int) -> np.ndarray:
    """How many of the ranks present should make each call: its group's members that have a trace."""
    present_ranks = {r["rank"] for r in ready}
    expected = np.full(keys, len(ready), dtype=np.int64)
    if not keys:
        return expected
    for position, rank in enumerate(ready):
        groups = rank["summary"]["process_groups"]
        mask = (calls["rank"] == position) & (calls["pg_local"] >= 0)
        for group_index in np.unique(calls["pg_local"][mask]).tolist():
            members = groups[group_index].get("ranks")
            if isinstance(members, list):
                count = len(present_ranks.intersection(members))
                expected[np.unique(calls["key"][mask & (calls["pg_local"] == group_index)])] = max(count, 1)
    return expected


def _size_mismatches(calls: dict[str, np.ndarray], keys: int) -> int:
    known = calls["bytes"] >= 0
    if not known.any():
        return 0
    key = calls["key"][known]
    size = calls["bytes"][known].astype(np.float64)
    low, high = _group_min(key, size), _group_max(key, size)
    valid = np.isfinite(low) & (np.bincount(key, minlength=len(low)) > 1)
    kinds = _group_max(key, calls["kind"][known].astype(np.float64))
    all_to_all = np.zeros(len(low), dtype=bool)
    names = list(calls["kind_names"])
    if "all_to_all" in names:
        all_to_all = kinds == names.index("all_to_all")
    return int((valid & (low != high) & ~all_to_all).sum())


def _rank_row(rank: dict[str, Any], calls: dict[str, np.ndarray], matched: dict[str, Any]) -> dict[str, Any]:
    """The rank's four-way breakdown and synchronizing / data transfer time, per step and on average."""
    summary = rank["summary"]
    row: dict[str, Any] = {
        "worker": rank["worker"],
        "rank": rank["rank"],
        "rank_source": rank["rank_source"],
        "span": rank["span"],
        "file": rank["file"],
        "parallel": rank["parallel"],
        "state": "ready" if summary else "error",
        "error": rank["error"],
    }
    keys = ("computation_us", "overlapping_us", "communication_us", "other_us", "data_transfer_us", "synchronizing_us")
    if summary is None:
        return {**row, **dict.fromkeys(keys), "steps": []}
    position = rank["position"]
    steps = summary["steps"]
    mask = (calls["rank"] == position) & (calls["step"] >= 0)
    start, end = calls["start_ns"][mask], calls["end_ns"][mask]
    transfer = np.minimum(matched["min_dur"][calls["key"][mask]], end - start)
    step_starts = np.array([s["start_ns"] for s in steps], dtype=np.int64)
    step_ends = np.array([s["end_ns"] for s in steps], dtype=np.int64)
    comm = intervals.total_within(intervals.merge(start, end), step_starts, step_ends)
    real = intervals.total_within(intervals.merge(end - transfer, end), step_starts, step_ends)
    step_rows = []
    for i, step in enumerate(steps):
        step_rows.append(
            {
                "step": step["name"],
                "start_us": step["start_ns"] / NS_PER_US,
                "total_us": (step["end_ns"] - step["start_ns"]) / NS_PER_US,
                "computation_us": step["computation_ns"] / NS_PER_US,
                "overlapping_us": step["overlapping_ns"] / NS_PER_US,
                "communication_us": step["communication_ns"] / NS_PER_US,
                "other_us": step["other_ns"] / NS_PER_US,
                "data_transfer_us": int(real[i]) / NS_PER_US,
                "synchronizing_us": int(comm[i] - real[i]) / NS_PER_US,
            }
        )
    average = {k: (sum(s[k] for s in step_rows) / len(step_rows)) if step_rows else None for k in keys}
    identity = summary["identity"]
    return {
        **row,
        **average,
        "steps": step_rows,
        "mode": summary["mode"],
        "backend": identity["backend"],
        "world_size": identity["world_size"],
        "calls": int((calls["rank"] == position).sum()),
        "hta": _hta_us(summary.get("hta")),
        "warnings": summary.get("warnings", []),
    }


def _hta_us(hta: dict[str, Any] | None) -> dict[str, Any] | None:
    if not hta:
        return None
    idle = hta["idle"]
    return {
        "temporal": _us_keys(hta["temporal"]),
        "temporal_hta_filter": _us_keys(hta["temporal_hta_filter"]),
        "activities_without_stream": hta["activities_without_stream"],
        "idle": {
            "host_wait_us": idle["host_wait_ns"] / NS_PER_US,
            "kernel_wait_us": idle["kernel_wait_ns"] / NS_PER_US,
            "other_us": idle["other_ns"] / NS_PER_US,
            "streams": [
                {
                    "device": s["device"],
                    "stream": s["stream"],
                    "host_wait_us": s["host_wait_ns"] / NS_PER_US,
                    "kernel_wait_us": s["kernel_wait_ns"] / NS_PER_US,
                    "other_us": s["other_ns"] / NS_PER_US,
                }
                for s in idle["streams"]
            ],
            "kernel_wait_threshold_us": idle["kernel_wait_threshold_ns"] / NS_PER_US,
        },
        "comm_comp_overlap_ratio": hta["comm_comp_overlap_ratio"],
        "kernel_types": {
            label: {
                "time_us": value["time_ns"] / NS_PER_US,
                "count": value["count"],
                "top": [
                    {
                        "name": k["name"],
                        "count": k["count"],
                        "total_us": k["total_ns"] / NS_PER_US,
                        "mean_us": k["mean_ns"] / NS_PER_US,
                        "min_us": k["min_ns"] / NS_PER_US,
                        "max_us": k["max_ns"] / NS_PER_US,
                    }
                    for k in value["top"]
                ],
            }
            for label, value in hta["kernel_types"].items()
        },
    }


def _us_keys(values_ns: dict[str, int]) -> dict[str, float]:
    return {k.replace("_ns", "_us"): v / NS_PER_US for k, v in values_ns.items()}


def _call_name(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], index: int) -> str:
    table = ready[int(calls["rank"][index])]["summary"]["collectives"]
    return table["names"][int(calls["name_local"][index])]


def _op_stats(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], matched: dict[str, Any]) -> list[dict]:
    """torch-tb-profiler's Communication Operations Stats, per rank and op name."""
    rows = []
    for position, rank in enumerate(ready):
        table = rank["summary"]["collectives"]
        mask = calls["rank"] == position
        names = calls["name_local"][mask]
        start, end, size = calls["start_ns"][mask], calls["end_ns"][mask], calls["bytes"][mask]
        transfer = np.minimum(matched["min_dur"][calls["key"][mask]], end - start)
        for index in np.unique(names).tolist():
            of = names == index
            calls_count = int(of.sum())
            known = size[of] >= 0
            total_bytes = int(size[of][known].sum()) if known.any() else None
            latency = intervals.total(intervals.merge(start[of], end[of])) / NS_PER_US
            real = intervals.total(intervals.merge(end[of] - transfer[of], end[of])) / NS_PER_US
            rows.append(
                {
                    "worker": rank["worker"],
                    "rank": rank["rank"],
                    "name": table["names"][index],
                    "calls": calls_count,
                    "total_bytes": total_bytes,
                    "avg_bytes": total_bytes / int(known.sum()) if total_bytes is not None else None,
                    "total_latency_us": latency,
                    "avg_latency_us": latency / calls_count,
                    "data_transfer_us": real,
                    "avg_data_transfer_us": real / calls_count,
                    "synchronizing_us": latency - real,
                }
            )
    return rows


def _process_groups(ready: list[dict[str, Any]], calls: dict[str, np.ndarray], matched: dict[str, Any]) -> list[dict]:
    """Per process group: members, what it is (from its description), and its collectives' cost."""
    groups: dict[str, dict[str, Any]] = {}
    for position, rank in enumerate(ready):
        for index, group in enumerate(rank["summary"]["process_groups"]):
            key = _group_key(group)
            entry = groups.setdefault(
                key,
                {
                    "name": group.get("name"),
                    "desc": group.get("desc"),
                    "ranks": group.get("ranks"),
                    "size": group.get("size"),
                    "backend": group.get("backend"),
                    "dimension": _dimension(group.get("desc") or ""),
                    "ranks_with_trace": [],
                    "_local": [],
                },
            )
            entry["ranks_with_trace"].append(rank["rank"])
            entry["_local"].append((position, index))
    unknown = {"name": None, "desc": "(no process group recorded)", "ranks": None, "size": None, "backend": None,
               "dimension": None, "ranks_with_trace": [r["rank"] for r in ready],
               "_local": [(p, -1) for p in range(len(ready))]}  # fmt: skip
    if (calls["pg_local"] < 0).any():
        groups["\0unknown"] = unknown
    rows = []
    duration = calls["dur_ns"]
    transfer = np.minimum(matched["min_dur"][calls["key"]], duration) if len(duration) else duration
    for entry in groups.values():
        mask = np.zeros(len(duration), dtype=bool)
        for position, index in entry.pop("_local"):
            mask |= (calls["rank"] == position) & (calls["pg_local"] == index)
        sizes = calls["bytes"][mask]
        kinds = sorted({calls["kind_names"][k] for k in np.unique(calls["kind"][mask]).tolist()})
        rows.append(
            {
                **entry,
                "collective_types": kinds,
                "calls": int(mask.sum()),
                "collectives": len(np.unique(calls["key"][mask])),
                "total_us": float(duration[mask].sum()) / NS_PER_US,
                "data_transfer_us": float(transfer[mask].sum()) / NS_PER_US,
                "synchronizing_us": float((duration[mask] - transfer[mask]).sum()) / NS_PER_US,
                "total_bytes": int(sizes[sizes >= 0].sum()) if (sizes >= 0).any() else None,
            }
        )
    rows.sort(key=lambda r: -r["total_us"])
    return rows


def _dimension(desc: str) -> str | None:
    """What a process group is for, when its description says (``mesh_tp``, ``dp_replicate``...)."""
    if desc == "default_pg":
        return "world"
    found = _GROUP_DIMENSION.search(desc)
    return found.group(1).lower() if found else None


def _stragglers(
    ready: list[dict[str, Any]], calls: dict[str, np.ndarray], matched: dict[str, Any], alignment: dict[str, Any]
) -> tuple[list[dict], list[dict]]:
    """Who arrives last at each collective, how often, and how long the others wait for them."""
    key = calls["key"]
    count = len(key)
    keys = len(matched["present"])
    offsets = np.array([r.get("offset_us", 0.0) for r in ready], dtype=np.float64)
    start_us = calls["start_ns"] / NS_PER_US + (offsets[calls["rank"]] if count else 0.0)
    end_us = calls["end_ns"] / NS_PER_US + (offsets[calls["rank"]] if count else 0.0)
    shared = matched["present"] > 1
    first = _group_min(key, start_us) if count else np.zeros(0)
    last = _group_max(key, start_us) if count else np.zeros(0)
    skew = start_us - first[key] if count else np.zeros(0)
    wait = last[key] - start_us if count else np.zeros(0)
    lost = np.zeros(keys)
    np.add.at(lost, key, wait)
    # the last arrival of every shared collective (ties: the later end, then the lower rank)
    order = np.lexsort((-calls["rank"], end_us, start_us, key)) if count else np.zeros(0, dtype=np.int64)
    last_call = np.full(keys, -1, dtype=np.int64)
    if count:
        last_call[key[order]] = order
    per_rank = []
    for position, rank in enumerate(ready):
        mine = calls["rank"] == position
        in_shared = mine & shared[key] if count else mine
        is_last = np.zeros(keys, dtype=bool)
        late = shared & (last > first) if count else np.zeros(0, dtype=bool)
        if count:
            is_last[late] = calls["rank"][last_call[late]] == position
        worst = int(np.argmax(np.where(is_last, lost, -1.0))) if is_last.any() else None
        per_rank.append(
            {
                "worker": rank["worker"],
                "rank": rank["rank"],
                "shared_calls": int(in_shared.sum()),
                "last_count": int(is_last.sum()),
                "last_pct": 100.0 * int(is_last.sum()) / max(int(late.sum()), 1) if count else 0.0,
                "lost_us": float(lost[is_last].sum()),
                "mean_skew_us": float(skew[in_shared].mean()) if in_shared.any() else None,
                "max_skew_us": float(skew[in_shared].max()) if in_shared.any() else None,
                "worst": _collective_row(ready, calls, matched, worst, start_us, end_us, lost)
                if worst is not None
                else None,
            }
        )
    ranked = np.argsort(-lost, kind="stable")
    listed = [int(k) for k in ranked[:MAX_COLLECTIVES_LISTED].tolist() if shared[k] and lost[k] > 0]
    collectives = [_collective_row(ready, calls, matched, k, start_us, end_us, lost) for k in listed]
    slowest = max(per_rank, key=lambda r: (r["lost_us"], r["last_count"]), default=None)
    for row in per_rank:
        row["slowest"] = slowest is not None and row is slowest and row["lost_us"] > 0
    return per_rank, collectives


def _collective_row(
    ready: list[dict[str, Any]],
    calls: dict[str, np.ndarray],
    matched: dict[str, Any],
    key_id: int,
    start_us: np.ndarray,
    end_us: np.ndarray,
    lost: np.ndarray,
) -> dict[str, Any]:
    members = np.flatnonzero(calls["key"] == key_id)
    members = members[np.lexsort((calls["rank"][members], start_us[members]))]
    first_start = float(start_us[members].min())
    last_index = members[-1]
    arrivals = [
        {
            "worker": ready[int(calls["rank"][i])]["worker"],
            "rank": ready[int(calls["rank"][i])]["rank"],
            "skew_us": float(start_us[i] - first_start),
            "duration_us": float(calls["dur_ns"][i]) / NS_PER_US,
            "wait_us": float(start_us[last_index] - start_us[i]),
        }
        for i in members.tolist()
    ]
    pg_name = calls["pg_names"][int(calls["pg"][last_index])]
    window_start = first_start
    window_end = float(end_us[members].max())
    pad = max((window_end - window_start) * 0.1, 10.0)
    # Trace view link: the late rank first, then the first to arrive, then the others by rank
    late = arrivals[-1]["worker"]
    others = sorted(arrivals[:-1], key=lambda a: (a is not arrivals[0], a["rank"]))
    workers = [late, *[a["worker"] for a in others]][:MAX_TRACE_WORKERS]
    lead = next(r for r in ready if r["worker"] == late)
    sizes = calls["bytes"][members]
    return {
        "key": int(key_id),
        "name": _call_name(ready, calls, int(last_index)),
        "kind": str(calls["kind_names"][int(calls["kind"][last_index])]),
        "process_group": pg_name or None,
        "seq": int(calls["order"][last_index]) if calls["by_seq"][last_index] else None,
        "ordinal": None if calls["by_seq"][last_index] else int(calls["order"][last_index]),
        "ranks": len(members),
        "expected_ranks": int(matched["expected"][key_id]),
        "bytes": int(sizes.max()) if (sizes >= 0).any() else None,
        "last_worker": late,
        "last_rank": arrivals[-1]["rank"],
        "skew_us": float(start_us[last_index] - first_start),
        "lost_us": float(lost[key_id]),
        "data_transfer_us": float(matched["min_dur"][key_id]) / NS_PER_US,
        "arrivals": arrivals,
        "trace": {
            "workers": workers,
            "event": int(calls["event"][last_index]),  # the late rank's call: the page selects it
            "start_us": window_start - pad - lead.get("offset_us", 0.0),
            "end_us": window_end + pad - lead.get("offset_us", 0.0),
        },
    }


def _topology(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes -> processes -> GPUs (torch-tb-profiler's Device information panel)."""
    nodes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rank in ranks:
        summary = rank["summary"] or {}
        host = (summary.get("host") or {}).get("hostname")
        pid = (summary.get("host") or {}).get("pid")
        if not host:
            match = _NODE_PROCESS.match(rank["worker"])
            host = _host_of(rank["worker"]) or (match.group(1) if match else None)
            pid = pid or (match.group(2) if match else None)
        nodes[host or "unknown host"].append(
            {"worker": rank["worker"], "rank": rank["rank"], "pid": pid, "gpus": summary.get("devices", [])}
        )
    return [{"host": host, "processes": processes} for host, processes in nodes.items()]
