"""Catalog: which objects under the roots are runs, workers and spans.

Layout rules (what people really have):
- ``tensorboard_trace_handler`` names ``{worker}.{time_ns}.pt.trace.json[.gz]`` (worker names may
  contain dots, e.g. ``host_pid`` or Megatron's ``hostname_pid``); the number names the span;
- plain Chrome traces ``*.json[.gz]`` (HTA's ``rank-N.json.gz``): the file stem names the worker;
- InternLM's ``traces/rank{r}_dp{d}_tp{t}_pp{p}/`` folders: the folder names the worker and its
  parent folder is the run;
- a run is a folder of such files; files that appear later in a known run join it;
- CUDA allocator snapshots (``*.pickle`` / ``*.pkl``) join the run of their folder; their worker is
  the rank in their name (Megatron's ``oom_rank-3_*.pickle`` -> ``rank3``) or their rank folder, else
  the file's stem;
- InternLM ``memory.log`` files (``SimpleMemoryProfiler``) join the run of their folder like traces:
  in a rank folder (``memory_trace/rank0_dp0_tp0/memory.log``) the folder is the worker and its parent
  the run, so InternLM's ``memory_trace/`` stands as a run of its own; elsewhere the worker is the rank
  in the folder's name, else the folder's name;
- files that are clearly not kineto traces (Nsight exports) are listed with the reason they are
  not read as traces.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from profscope import parser_versions
from profscope.sources.base import ObjectInfo

_HANDLER_NAME = re.compile(r"^(?P<worker>.+?)(?:\.(?P<span>\d+))?\.pt\.trace\.json(?:\.gz)?$")
_PLAIN_JSON = re.compile(r"^(?P<stem>.+?)\.json(?:\.gz)?$")
_RANK_FOLDER = re.compile(r"^rank\d+(?:_[A-Za-z]+\d+)*$")
_MEMORY_SNAPSHOT = re.compile(r"\.(pickle|pkl)$")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE)
TRACE, SNAPSHOT, MEMORY_LOG = "trace", "snapshot", "memory_log"
MEMORY_LOG_NAME = "memory.log"
_NOT_TRACES = {
    ".sqlite": "an Nsight Systems SQLite export; profscope reads torch.profiler (kineto) Chrome traces",
    ".nsys-rep": "an Nsight Systems report; profscope reads torch.profiler (kineto) Chrome traces",
    ".qdrep": "an Nsight Systems report; profscope reads torch.profiler (kineto) Chrome traces",
}
_TRACE_LIKE = re.compile(r"\.(json|json\.gz|raw\.gz)$")
DEFAULT_SPAN = "default"


@dataclass
class TraceFile:
    source: str  # the root URI the key is relative to
    info: ObjectInfo
    run: str
    worker: str
    span: str
    refusal: str | None = None  # set when the file is listed but not read as a trace
    kind: str = TRACE  # or SNAPSHOT (a CUDA allocator snapshot) or MEMORY_LOG: read by the Memory view

    @property
    def key(self) -> str:
        return self.info.key

    @property
    def cache_key(self) -> str:
        """Identity of the parsed result: changes when the object or the parser changes."""
        version = {
            TRACE: parser_versions.TRACE,
            SNAPSHOT: f"snapshot{parser_versions.SNAPSHOT}",
            MEMORY_LOG: f"memorylog{parser_versions.MEMORY_LOG}",
        }[self.kind]
        text = f"{self.source}\0{self.info.key}\0{self.info.size}\0{self.info.version}\0{version}"
        return hashlib.sha1(text.encode()).hexdigest()


@dataclass
class Run:
    name: str
    files: list[TraceFile] = field(default_factory=list)

    def traces(self) -> list[TraceFile]:
        return [f for f in self.files if f.refusal is None and f.kind == TRACE]

    def snapshots(self) -> list[TraceFile]:
        """Allocator snapshots, by worker then name (``span`` holds the snapshot's name)."""
        found = [f for f in self.files if f.kind == SNAPSHOT]
        return sorted(found, key=lambda f: (_worker_order(f.worker), f.span))

    def find_snapshot(self, worker: str | None, name: str | None) -> TraceFile | None:
        """The snapshot of (worker, name); missing ones mean the first. Named but absent finds nothing."""
        for snapshot in self.snapshots():
            if (worker is None or snapshot.worker == worker) and (name is None or snapshot.span == name):
                return snapshot
        return None

    def memory_logs(self) -> list[TraceFile]:
        """InternLM memory.log files, by worker (``span`` holds the file's name)."""
        found = [f for f in self.files if f.kind == MEMORY_LOG]
        return sorted(found, key=lambda f: _worker_order(f.worker))

    def find_memory_log(self, worker: str | None) -> TraceFile | None:
        """The memory.log of a worker; a missing worker means the first. Named but absent finds nothing."""
        return next((log for log in self.memory_logs() if worker is None or log.worker == worker), None)

    def workers(self) -> dict[str, list[str]]:
        """worker -> span ids in time order."""
        spans: dict[str, list[str]] = {}
        for trace in self.traces():
            spans.setdefault(trace.worker, []).append(trace.span)
        return {w: sorted(s, key=_span_order) for w, s in sorted(spans.items(), key=lambda kv: _worker_order(kv[0]))}

    def find(self, worker: str | None, span: str | None) -> TraceFile | None:
        """The trace of (worker, span); a missing worker or span means the first one.

        A worker or span that is named but does not exist finds nothing: a pasted link must never
        silently show another rank's data. A span id of another worker of the run (or ``#n``) finds
        this worker's span at the same position (see ``span_group``): the same window on every rank.
        """
        workers = self.workers()
        if not workers or (worker is not None and worker not in workers):
            return None
        worker = worker if worker is not None else next(iter(workers))
        spans = workers[worker]
        if span is not None and span not in spans:
            # another rank's span id (or "#n"): this worker's span at the same position
            group = self.span_group(span)
            if group is None or worker not in group[1]:
                return None
            span = group[1][worker]
        span = span if span is not None else spans[0]
        return next(t for t in self.traces() if t.worker == worker and t.span == span)

    def span_group(self, span: str | None) -> tuple[int, dict[str, str]] | None:
        """The same profiling window on every worker: (position, worker -> span id).

        Ranks of one job write their spans at slightly different times, so their span ids differ;
        the n-th span of each worker is taken as the same window (torch-tb-profiler renumbered
        each worker's spans 1..N the same way). ``span`` is any worker's span id, or ``#n``
        (1-based); None means the first. None when no worker has that span.
        """
        workers = self.workers()
        position = 0
        if span is not None and span.startswith("#") and _is_number(span[1:]):
            position = int(span[1:]) - 1
        elif span is not None:
            found = [spans.index(span) for spans in workers.values() if span in spans]
            if not found:
                return None
            position = found[0]
        group = {worker: spans[position] for worker, spans in workers.items() if 0 <= position < len(spans)}
        return (position, group) if group else None


def _is_number(text: str) -> bool:
    """ASCII digits only: ``'²'.isdigit()`` is true but ``int('²')`` fails (a file may be named so)."""
    return text.isascii() and text.isdigit()


def _span_order(span: str) -> tuple:
    return (0, int(span), span) if _is_number(span) else (1, 0, span)


def _worker_order(worker: str) -> tuple:
    numbers = re.findall(r"[0-9]+", worker)
    return (re.sub(r"[0-9]+", "#", worker), [int(n) for n in numbers], worker)


def classify(key: str) -> tuple[str, str, str, str | None] | None:
    """(run folder, worker, span, refusal) for an object key, or None when it is not ours."""
    path = PurePosixPath(key)
    folder = str(path.parent) if str(path.parent) != "." else ""
    name = path.name
    lowered = name.lower()
    for suffix, reason in _NOT_TRACES.items():
        if lowered.endswith(suffix):
            return folder, path.stem, name, f"not a trace: {reason}"
    if not _TRACE_LIKE.search(lowered):
        return None
    worker_folder = path.parent.name
    if _RANK_FOLDER.match(worker_folder):
        run_folder = str(path.parent.parent) if str(path.parent.parent) != "." else ""
        handler = _HANDLER_NAME.match(name)
        span = (handler.group("span") if handler and handler.group("span") else _stem(name)) or DEFAULT_SPAN
        return run_folder, worker_folder, span, None
    handler = _HANDLER_NAME.match(name)
    if handler:
        return folder, handler.group("worker"), handler.group("span") or DEFAULT_SPAN, None
    plain = _PLAIN_JSON.match(name)
    if plain:
        return folder, plain.group("stem"), DEFAULT_SPAN, None
    return folder, name, DEFAULT_SPAN, None  # *.raw.gz and friends: the parser says what they are


def classify_snapshot(key: str) -> tuple[str, str, str] | None:
    """(run folder, worker, snapshot name) of an allocator snapshot, or None when the key is not one."""
    path = PurePosixPath(key)
    if not _MEMORY_SNAPSHOT.search(path.name.lower()):
        return None
    folder = str(path.parent) if str(path.parent) != "." else ""
    if _RANK_FOLDER.match(path.parent.name):
        run_folder = str(path.parent.parent) if str(path.parent.parent) != "." else ""
        return run_folder, path.parent.name, path.stem
    rank = _RANK_IN_NAME.search(path.stem)
    return folder, f"rank{rank.group(1)}" if rank else path.stem, path.stem


def classify_memory_log(key: str) -> tuple[str, str, str] | None:
    """(run folder, worker, file name) of an InternLM memory.log, or None when the key is not one."""
    path = PurePosixPath(key)
    if path.name != MEMORY_LOG_NAME:
        return None
    folder = str(path.parent) if str(path.parent) != "." else ""
    if _RANK_FOLDER.match(path.parent.name):
        run_folder = str(path.parent.parent) if str(path.parent.parent) != "." else ""
        return run_folder, path.parent.name, path.name
    rank = _RANK_IN_NAME.search(path.parent.name)
    return folder, f"rank{rank.group(1)}" if rank else path.parent.name or "memory", path.name


def _stem(name: str) -> str:
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def build_runs(listings: list[tuple[str, str, list[ObjectInfo]]]) -> dict[str, Run]:
    """Runs from ``(root label, root uri, objects)`` listings, in the order the roots are configured.

    A run is named after its folder in its root (the root's label when the root is the run folder),
    whatever other roots there are, so a link keeps working when a root is added (issue 20). Only
    when an earlier root already has a run of that name does the later one get its root's label in
    front (``label/folder``).
    """
    runs: dict[str, Run] = {}
    owner: dict[str, str] = {}  # run name -> the root uri it came from
    for label, uri, objects in listings:
        for info in objects:
            kind = TRACE
            found = classify(info.key)
            snapshot = classify_snapshot(info.key) if found is None else None
            memory_log = classify_memory_log(info.key) if found is None and snapshot is None else None
            if snapshot is not None:
                kind, found = SNAPSHOT, (*snapshot, None)
            elif memory_log is not None:
                kind, found = MEMORY_LOG, (*memory_log, None)
            if found is None:
                continue
            folder, worker, span, refusal = found
            run_name = folder or label
            if owner.setdefault(run_name, uri) != uri:
                run_name = f"{label}/{folder}" if folder else f"{label}~2"
                owner.setdefault(run_name, uri)
            run = runs.setdefault(run_name, Run(name=run_name))
            run.files.append(
                TraceFile(source=uri, info=info, run=run_name, worker=worker, span=span, refusal=refusal, kind=kind)
            )
    for run in runs.values():
        _make_spans_unique(run)
    return dict(sorted(runs.items()))


def moved_run(name: str, runs: list[str], labels: list[str]) -> str | None:
    """Where a run a link names went, or None: links written while run names carried their root's
    label (``label/folder``, before issue 20) lead to ``folder``, and the other way round; else the
    one run whose name ends with the link's last folder."""
    known = set(runs)
    for label in labels:
        if name.startswith(f"{label}/") and name[len(label) + 1 :] in known:
            return name[len(label) + 1 :]
        if f"{label}/{name}" in known:
            return f"{label}/{name}"
    tail = PurePosixPath(name).name
    same_tail = [run for run in runs if PurePosixPath(run).name == tail]
    return same_tail[0] if len(same_tail) == 1 else None


def _make_spans_unique(run: Run) -> None:
    seen: dict[tuple[str, str], int] = {}
    for trace in sorted(run.traces(), key=lambda t: t.key):
        slot = (trace.worker, trace.span)
        seen[slot] = seen.get(slot, 0) + 1
        if seen[slot] > 1:  # e.g. both trace.json and trace.json.gz: keep both, told apart
            trace.span = f"{trace.span}~{PurePosixPath(trace.key).name}"
