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
- PaddlePaddle's ``export_chrome_tracing`` names ``{worker}_time_{Y_m_d_H_M_S_us}.paddle_trace.json``
  (worker ``host_{hostname}pid_{pid}`` by default, one per rank): the time stamp names the span;
- Nsight Systems SQLite exports (``*.sqlite``) are traces of their own kind (``NSYS``), named like the
  others: a rank folder, ``rank3`` in the name (``megatron_rank3.sqlite``), or, when every export of a
  folder is one prefix plus a number (``-o prof_%q{RANK}`` gives ``prof_0.sqlite``, ``prof_1.sqlite``),
  that number as the rank; whether the file really is an export is the parser's to say (by content);
- Nsight reports (``.nsys-rep``, ``.qdrep``) are listed with how to export them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from profscope import parser_versions
from profscope.sources.base import ObjectInfo

_HANDLER_NAME = re.compile(r"^(?P<worker>.+?)(?:\.(?P<span>\d+))?\.pt\.trace\.json(?:\.gz)?$")
_PADDLE_NAME = re.compile(r"^(?P<worker>.+?)_time_(?P<stamp>[\d_]+)\.paddle_trace\.json(?:\.gz)?$")
_PLAIN_JSON = re.compile(r"^(?P<stem>.+?)\.json(?:\.gz)?$")
_RANK_FOLDER = re.compile(r"^rank\d+(?:_[A-Za-z]+\d+)*$")
_MEMORY_SNAPSHOT = re.compile(r"\.(pickle|pkl)$")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE)
_NSYS_EXPORT = re.compile(r"\.sqlite$")
_NUMBERED_STEM = re.compile(r"^(?P<prefix>.*?[_.-])(?P<number>\d+)$")
TRACE, SNAPSHOT, MEMORY_LOG, NSYS = "trace", "snapshot", "memory_log", "nsys"
TABLE_KINDS = (TRACE, NSYS)  # files parsed into event tables: every trace view reads them
MEMORY_LOG_NAME = "memory.log"
EXPORT_HINT = "export it with `nsys export --type sqlite FILE.nsys-rep` (profscope cannot read the binary format)"
_NOT_TRACES = {
    ".nsys-rep": f"an Nsight Systems report: {EXPORT_HINT}",
    ".qdrep": f"an Nsight Systems report: {EXPORT_HINT}",
    ".paddle_trace.pb": "a PaddlePaddle protobuf profile (export_protobuf); profscope reads the JSON of "
    "paddle.profiler.export_chrome_tracing",
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
    kind: str = TRACE  # or NSYS (an Nsight Systems export), SNAPSHOT or MEMORY_LOG (read by the Memory view)

    @property
    def key(self) -> str:
        return self.info.key

    @property
    def cache_key(self) -> str:
        """Identity of the parsed result: changes when the object or the parser changes."""
        version = {
            TRACE: _trace_parser_version(self.info.key),
            NSYS: f"nsys{parser_versions.NSYS}",
            SNAPSHOT: f"snapshot{parser_versions.SNAPSHOT}",
            MEMORY_LOG: f"memorylog{parser_versions.MEMORY_LOG}",
        }[self.kind]
        text = f"{self.source}\0{self.info.key}\0{self.info.size}\0{self.info.version}\0{version}"
        return hashlib.sha1(text.encode()).hexdigest()


def _trace_parser_version(key: str) -> str:
    """Paddle's parser has a version of its own: files named as Paddle names them carry it too.

    (A Paddle trace under another name is still read as one, by content, but its cached tables are
    only invalidated with the kineto parser's version.)
    """
    if _PADDLE_NAME.match(PurePosixPath(key).name):
        return f"{parser_versions.TRACE}.paddle{parser_versions.PADDLE}"
    return str(parser_versions.TRACE)


@dataclass
class Run:
    name: str
    files: list[TraceFile] = field(default_factory=list)

    def traces(self) -> list[TraceFile]:
        return [f for f in self.files if f.refusal is None and f.kind in TABLE_KINDS]

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
    paddle = _PADDLE_NAME.match(name)
    if paddle:
        return folder, paddle.group("worker"), paddle.group("stamp").replace("_", ""), None
    plain = _PLAIN_JSON.match(name)
    if plain:
        return folder, plain.group("stem"), DEFAULT_SPAN, None
    return folder, name, DEFAULT_SPAN, None  # *.raw.gz and friends: the parser says what they are


def classify_snapshot(key: str) -> tuple[str, str, str] | None:
    """(run folder, worker, snapshot name) of an allocator snapshot, or None when the key is not one."""
    path = PurePosixPath(key)
    if not _MEMORY_SNAPSHOT.search(path.name.lower()):
        return None
    return _per_rank_file(path, path.stem)


def classify_nsys(key: str) -> tuple[str, str, str] | None:
    """(run folder, worker, span) of an Nsight Systems SQLite export, or None when the key is not one."""
    path = PurePosixPath(key)
    if not _NSYS_EXPORT.search(path.name.lower()):
        return None
    return _per_rank_file(path, DEFAULT_SPAN)


def _per_rank_file(path: PurePosixPath, span: str) -> tuple[str, str, str]:
    """(run folder, worker, span) of a file written per rank: in a rank folder, the folder is the worker (and
    the file's stem the span); elsewhere the rank in its name (``oom_rank-3_*`` -> ``rank3``), else its stem."""
    folder = str(path.parent) if str(path.parent) != "." else ""
    if _RANK_FOLDER.match(path.parent.name):
        run_folder = str(path.parent.parent) if str(path.parent.parent) != "." else ""
        return run_folder, path.parent.name, path.stem
    rank = _RANK_IN_NAME.search(path.stem)
    return folder, f"rank{rank.group(1)}" if rank else path.stem, span


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
            nsys = classify_nsys(info.key) if found is None else None
            snapshot = classify_snapshot(info.key) if found is None and nsys is None else None
            memory_log = classify_memory_log(info.key) if found is None and snapshot is None else None
            if nsys is not None:
                kind, found = NSYS, (*nsys, None)
            elif snapshot is not None:
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
        _rank_numbered_exports(run)
        _make_spans_unique(run)
    return dict(sorted(runs.items()))


def _rank_numbered_exports(run: Run) -> None:
    """``prof_0.sqlite``, ``prof_1.sqlite``, ... (``nsys -o prof_%q{RANK}``): the number is the rank.

    Only when every export of the run without a rank in its name is the same prefix plus a distinct
    number: a lone ``report_1234.sqlite`` (``%p``, a pid) keeps its name.
    """
    unnamed = [f for f in run.files if f.kind == NSYS and not f.worker.startswith("rank")]
    numbered = [_NUMBERED_STEM.match(f.worker) for f in unnamed]
    if len(unnamed) < 2 or not all(numbered):
        return
    prefixes = {m.group("prefix") for m in numbered if m}
    numbers = [int(m.group("number")) for m in numbered if m]
    if len(prefixes) == 1 and len(set(numbers)) == len(numbers):
        for export, number in zip(unnamed, numbers, strict=True):
            export.worker = f"rank{number}"


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


@dataclass(frozen=True)
class RunFacts:
    """What the views need to know of a run to say whether they apply to it."""

    traces: int  # trace files (parsed or not)
    kernels: bool  # a parsed trace has GPU kernels
    memory: bool  # allocator snapshots, memory.log files, or a parsed trace with memory events
    workers: int
    distributed_info: bool  # the first trace records ``distributedInfo``
    not_distributed: str | None = None  # why its traces are not ranks of one job (``docs/definitions.md``)
    trace_format: str | None = None  # its first trace's writer once parsed: "kineto" or "paddle"
