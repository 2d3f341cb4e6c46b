"""Response models of the JSON twins: what ``/openapi.json`` documents for every ``/api`` route.

The routers answer with pre-serialised JSON (orjson, for speed), so these models document and test the
answers rather than build them: ``tests/test_response_models.py`` validates each route's real answers on
corpus files against its model, which forbids unknown keys, so a renamed key fails there instead of
breaking a page silently. Free-form parts (a slice's ``args``, a Chrome trace export) are plain dicts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Number = float  # pydantic reads an int as a float; integers stay exact in JSON either way
Row = dict[str, Any]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class TraceIdent(Strict):
    run: str
    worker: str
    span: str
    file: str


# ---- runs ---------------------------------------------------------------------------------------
class WorkerSpans(Strict):
    worker: str
    spans: list[str]
    inferred_rank: int | None = None  # present when its trace records no rank and one was inferred (definitions §10)


class MovedRun(Strict):
    run: str  # the name the link holds
    moved_to: str | None  # the run it most likely means now; null when there is none


class FileError(Strict):
    file: str
    message: str | None


class FileState(Strict):
    file: str
    worker: str
    bytes: int
    state: str
    bytes_done: int
    bytes_total: int
    progress: Number
    message: str | None
    seen_at: Number | None = Field(
        description="When this server first listed the file (Unix time, s; a changed file is listed anew)"
    )


class TraceFileState(FileState):
    span: str


class SnapshotFileState(FileState):
    snapshot: str
    oom_devices: list[int]  # devices whose trace holds an ``oom`` entry (docs/definitions.md §19)


class MemoryLogFileState(FileState):
    log: str


class RunStatus(Strict):
    run: str
    state: str
    progress: Number
    workers: list[WorkerSpans]
    views: list[str]
    view_states: dict[str, Literal["ready", "computing"]] = Field(
        description="Each view of `views`: `ready` once its results are there for every file of the run that "
        "has not failed (the Overview comes first, before the slower views), else `computing`"
    )
    unavailable: dict[str, str]
    errors: list[FileError]
    files: list[TraceFileState]
    snapshots: list[SnapshotFileState]
    memory_logs: list[MemoryLogFileState]


class RootState(Strict):
    root: str
    error: str | None
    objects: int
    listed_at: Number | None
    stale: bool


class RunList(Strict):
    runs: list[RunStatus]
    roots: list[RootState]


class IngestStatus(Strict):
    state: str
    bytes_done: int
    bytes_total: int
    progress: Number
    message: str | None


# ---- overview -----------------------------------------------------------------------------------
class StepTimes(Strict):
    total_us: Number
    kernel_us: Number
    memcpy_us: Number
    memset_us: Number
    communication_us: Number
    runtime_us: Number
    dataloader_us: Number
    cpu_exec_us: Number
    other_us: Number


class StepBreakdown(StepTimes):
    step: str
    start_us: Number


class GpuSummary(Strict):
    device: int
    name: str | None
    memory_bytes: int | None
    compute_capability: str | None
    utilization_pct: Number
    est_sm_efficiency_pct: Number | None
    est_achieved_occupancy_pct: Number | None
    tensor_cores_pct: Number
    kernel_time_us: Number


class StepRangeCandidate(Strict):
    """A repeated annotation range that may be picked as the step (``step_range=``)."""

    name: str
    count: int


class Overview(TraceIdent):
    environment: Row
    steps: list[StepBreakdown]
    average: StepTimes
    gpus: list[GpuSummary]
    recommendations: list[str]
    notes: list[str]
    steps_from_profiler_steps: bool
    step_ranges: list[StepRangeCandidate]
    step_range: str | None = None  # the picked range, when ``step_range=`` was given


# ---- modules ------------------------------------------------------------------------------------
class ModuleFrame(Strict):
    text: str
    path: str | None = None
    line: int | None = None
    func: str | None = None
    href: str | None = None
    external: str | None = None


class ModuleFirst(Strict):
    event: int
    track: int
    ts_us: Number
    dur_us: Number


class ModuleOperator(Strict):
    name: str
    calls: int
    host_us: Number
    device_us: Number


class ModuleKernel(Strict):
    name: str
    calls: int
    device_us: Number


class ModuleRow(Strict):
    id: int
    name: str
    type: str
    parent: int
    occurrences: int
    recomputations: int
    operators: int
    host_total_us: Number
    host_self_us: Number
    device_total_us: Number
    device_self_us: Number
    backward_host_us: Number
    backward_device_us: Number
    first: ModuleFirst
    frame: ModuleFrame | None
    top_operators: list[ModuleOperator]
    top_kernels: list[ModuleKernel]
    children: list[ModuleRow]


class PhaseTimes(Strict):
    step: str
    host_us: Number
    dataloader_us: Number
    optimizer_us: Number
    backward_us: Number
    forward_us: Number
    other_us: Number
    device_busy_us: Number
    device_dataloader_us: Number
    device_optimizer_us: Number
    device_backward_us: Number
    device_forward_us: Number
    device_other_us: Number


class Phases(Strict):
    applies: bool
    reason: str | None
    steps: list[PhaseTimes]
    average: PhaseTimes | None
    model_summary: list[PaddleRow]  # Paddle's Model Summary of these steps (docs/definitions.md §14.4)


class Modules(TraceIdent):
    applies: bool
    reason: str | None
    source: str | None
    modules: list[ModuleRow]
    phases: Phases


# ---- operators and kernels ----------------------------------------------------------------------
class TableCounts(Strict):
    total_rows: int
    matched_rows: int


class OperatorRow(Strict):
    name: str
    input_shape: str | None = None
    calls: int
    host_self_us: Number
    host_total_us: Number
    device_self_us: Number
    device_total_us: Number
    tensor_cores_eligible: bool
    tensor_cores_self_pct: Number
    tensor_cores_total_pct: Number


class OperatorTimeAccounting(Strict):
    """How the rows' self times add up (``docs/definitions.md``, "Operator time accounting")."""

    host_in_operators_us: Number
    host_self_us: Number
    host_runtime_in_operators_us: Number
    device_self_us: Number
    device_unattributed_us: Number
    device_total_us: Number


class OperatorModule(Strict):
    """The module an Operator table is filtered to (``module=``): its id, name, type and path from the root."""

    id: int
    name: str
    type: str
    path: str


class Operators(TraceIdent, TableCounts):
    group_by: str
    rows: list[OperatorRow]
    accounting: OperatorTimeAccounting
    empty_reason: str | None  # why there is no row, when the file says (an Nsight export without emit_nvtx)
    module: OperatorModule | None = None  # with ``module=``: the module whose calls the rows are


class OperatorStacks(TraceIdent):
    name: str
    input_shape: str | None
    stacks: list[Row]


class KernelRow(Strict):
    name: str
    calls: int
    total_us: Number
    mean_us: Number
    max_us: Number
    min_us: Number
    tensor_cores_used: bool
    mean_blocks_per_sm: Number | None
    mean_est_achieved_occupancy_pct: Number | None
    operator: str | None
    grid: list[int] | None = None
    block: list[int] | None = None
    registers_per_thread: int | None = None
    shared_memory: int | None = None
    op_tensor_cores_eligible: bool | None = None


class TensorCoreTime(Strict):
    using_us: Number
    not_using_us: Number


class Kernels(TraceIdent, TableCounts):
    group_by: str
    rows: list[KernelRow]
    tensor_cores: TensorCoreTime


# ---- memory -------------------------------------------------------------------------------------
class MemoryIdent(Strict):
    run: str
    worker: str
    file: str


class Peaks(Strict):
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None


class MemoryEventRow(Strict):
    operator: str | None
    size_bytes: int
    alloc_time_us: Number | None
    release_time_us: Number | None
    duration_us: Number | None


class MemoryStatRow(Strict):
    operator: str
    calls: int
    size_increase_bytes: int
    self_size_increase_bytes: int
    allocation_count: int
    self_allocation_count: int
    allocation_size_bytes: int
    self_allocation_size_bytes: int


class ProfilerMemory(MemoryIdent):
    span: str
    devices: list[str]
    device: str | None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    peaks: dict[str, Peaks] | None = None
    window_us: list[Number] | None = None
    points_in_window: int | None = None
    curve: list[list[Number | None]]
    curve_kind: Literal["totals", "bytes_running_sum"] | None = None  # docs/definitions.md §18
    curve_reason: str | None = None
    reason: str | None = None
    events: list[MemoryEventRow]
    stats: list[MemoryStatRow]


class SnapshotIdent(MemoryIdent):
    snapshot: str


class SnapshotDevice(Strict):
    device: int
    entries: int
    allocations: int
    peak_allocated_bytes: int
    end_allocated_bytes: int
    peak_reserved_bytes: int
    end_reserved_bytes: int
    segments: int
    oom_count: int
    first_oom_at_us: int | None  # on the timeline's axis; None without times


class SnapshotSummary(SnapshotIdent):
    shape: str
    devices: list[SnapshotDevice]
    oom_devices: list[int]
    has_time: bool
    allocator_settings: Row | None
    external_annotations: int
    warnings: list[str]


class SnapshotTimeline(SnapshotIdent):
    device: int
    axis: str
    origin_us: Number | None
    x_range: list[Number]
    window: list[Number]
    width_px: int
    height_px: int
    bytes_per_px: Number
    position_tolerance_px: Number
    peak_allocated_bytes: int
    allocations_in_window: int
    bands_shown: int
    summarized_count: int
    bands: list[Row]
    summarized: dict[str, list[Number]]
    allocated: dict[str, list[Number]]
    reserved: dict[str, list[Number]]
    stacks: dict[str, list[str]]


class SnapshotSegments(SnapshotIdent):
    device: int
    segment_count: int
    segments_shown: int
    reserved_bytes: int
    allocated_bytes: int
    requested_bytes: int
    rounding_waste_bytes: int
    pending_free_bytes: int
    cached_bytes: int
    largest_cached_block: int
    fragmentation: Number
    fragmentation_definition: str
    segments: list[Row]


class AllocationRow(Strict):
    id: int
    addr: str
    size: int
    stream: int
    alloc_entry: int | None
    free_entry: int | None
    alloc_time_us: Number | None
    free_time_us: Number | None
    alloc_at_us: Number | None
    free_at_us: Number | None
    before_trace: bool
    stack: int
    top_frames: list[Row]


class SnapshotTop(SnapshotIdent):
    device: int
    moment: str
    entry: int | None
    live_count: int
    live_bytes: int
    rows: list[AllocationRow]


class SnapshotStacks(SnapshotIdent):
    device: int
    moment: str
    entry: int | None
    total_bytes: int
    common_frames: list[Row]
    ids: list[str]
    labels: list[str]
    parents: list[str]
    values: list[int]


class SnapshotOoms(SnapshotIdent):
    device: int
    ooms: list[Row]


class SnapshotAllocation(SnapshotIdent, AllocationRow):
    device: int
    frames: list[Row]


class MemoryLogIdent(MemoryIdent):
    log: str


class MemoryLogCurve(MemoryLogIdent):
    points: int
    peak_allocated_bytes: int | None
    peak_reserved_bytes: None
    peak_time_us: Number | None
    categories: list[dict[str, str]]
    peaks: dict[str, int | None]
    at_peak: dict[str, int | None]
    sunbursts: list[dict[str, str]]
    warnings: list[str]
    window_us: list[Number]
    points_in_window: int
    curve: list[list[Number | None]]
    category_curve: dict[str, list[int]]


class MemoryLogLayers(MemoryLogIdent):
    category: str
    label: str
    layouts: list[str]
    time_us: Number | None
    total_bytes: int
    ids: list[str]
    labels: list[str]
    parents: list[str]
    values: list[int]


# ---- distributed --------------------------------------------------------------------------------
class Distributed(Strict):
    run: str
    applies: bool  # True: the ranks side by side (this model); False: see ``NotDistributed``
    span: str
    span_position: int
    workers: int
    ranks: list[Row]
    steps: list[str]
    topology: Row | list[Row]
    process_groups: list[Row]
    op_stats: list[Row] | Row
    collectives: list[Row]
    stragglers: list[Row]
    alignment: Row | str | None
    matching: Row
    warnings: list[str]


class NotDistributed(Strict):
    """A run whose traces are not ranks of one job (``docs/definitions.md`` §10)."""

    run: str
    applies: bool
    reason: str


# ---- trace view ---------------------------------------------------------------------------------
class TrackGroup(Strict):
    id: str
    name: str
    kind: str
    device: str | None = None


class Track(Strict):
    id: str
    group: str
    name: str
    kind: str
    max_depth: int | None = None
    events: int | None = None
    series: int | None = None
    min: Number | None = None
    max: Number | None = None
    unit: str | None = None
    mode: str | None = None


class TrackListing(TraceIdent):
    duration_us: Number
    wall_start_us: Number | None
    rank: int | None
    groups: list[TrackGroup]
    tracks: list[Track]


class WindowTrack(Strict):
    id: str
    name: str
    kind: str
    slices: list[Row] | None = None
    merged: list[Row] | None = None
    points: list[list[Number]] | None = None


class TimelineWindow(Strict):
    start_us: Number
    end_us: Number
    width_px: int
    tracks: list[WindowTrack]


class SliceDetails(TraceIdent):
    id: int
    name: str
    track: str
    start_us: Number
    dur_us: Number
    depth: int
    category: str | None
    kind: str
    track_name: str
    args: Row
    related: list[Row]
    stack: list[Row]


class SliceSearch(TraceIdent):
    q: str
    count: int
    index: int
    match: Row | None


class NameTime(Strict):
    name: str
    kind: str
    count: int
    total_us: Number
    avg_us: Number


class TrackTime(Strict):
    track: str
    name: str
    count: int
    busy_us: Number
    busy_pct: Number


class AreaSummary(TraceIdent):
    start_us: Number
    end_us: Number
    slices: int
    names: int
    by_name: list[NameTime]
    by_track: list[TrackTime]


class TraceExport(BaseModel):  # a Chrome trace: its top level carries whatever the source trace had
    traceEvents: list[Row]
    profscope: Row


# ---- source -------------------------------------------------------------------------------------
class SourceLines(Strict):
    path: str
    resolved: str
    line: int
    first_line: int
    lines: list[str]


# ---- diff ---------------------------------------------------------------------------------------
class DiffGpu(Strict):
    device: int
    utilization_pct: Number | None
    est_sm_efficiency_pct: Number | None
    est_achieved_occupancy_pct: Number | None
    tensor_cores_pct: Number | None


class DiffGpus(Strict):
    base: list[DiffGpu]
    target: list[DiffGpu]


class DiffSteps(Strict):
    base: StepTimes
    target: StepTimes
    delta: StepTimes
    base_steps: int
    target_steps: int
    gpus: DiffGpus


class DiffChange(Strict):
    delta_us: Number | None  # of the table's measured time, target - base
    ratio: Number | None  # target / base of it; None when the base is 0
    status: str  # changed | added | removed | same


class DiffOperatorRow(DiffChange):
    name: str
    input_shape: str | None
    base_calls: Number
    target_calls: Number
    base_host_self_us: Number
    target_host_self_us: Number
    base_host_total_us: Number
    target_host_total_us: Number
    base_device_self_us: Number | None  # None: that side recorded no GPU activity
    target_device_self_us: Number | None
    base_device_total_us: Number | None
    target_device_total_us: Number | None


class DiffKernelRow(DiffChange):
    name: str
    operator: str | None
    base_calls: Number
    target_calls: Number
    base_total_us: Number
    target_total_us: Number


class DiffTreeRow(DiffOperatorRow):
    input_shape: None = None
    kind: str  # op | kernel | memcpy | memset
    has_children: bool = False


class DiffTree(Strict):
    path: list[str]
    found: bool
    node: DiffTreeRow | None
    children: list[DiffTreeRow]


class DiffDeviceColumns(Strict):
    base: bool
    target: bool
    note: str | None


class DiffRankRow(Strict):
    rank: int | None
    base_worker: str | None
    target_worker: str | None
    base_computation_us: Number | None
    target_computation_us: Number | None
    delta_computation_us: Number | None
    base_overlapping_us: Number | None
    target_overlapping_us: Number | None
    delta_overlapping_us: Number | None
    base_communication_us: Number | None
    target_communication_us: Number | None
    delta_communication_us: Number | None
    base_other_us: Number | None
    target_other_us: Number | None
    delta_other_us: Number | None
    base_synchronizing_us: Number | None
    target_synchronizing_us: Number | None
    delta_synchronizing_us: Number | None
    base_data_transfer_us: Number | None
    target_data_transfer_us: Number | None
    delta_data_transfer_us: Number | None


class DiffDistributed(Strict):
    ranks: list[DiffRankRow]
    note: str | None


class Diff(TraceIdent):
    base: TraceIdent
    group_by: str
    kernel_group_by: str
    same_trace: bool
    message: str | None
    normalisation: str  # total | per_step
    normalisation_note: str | None
    device_columns: DiffDeviceColumns | None
    steps: DiffSteps | None
    operators: list[DiffOperatorRow]
    kernels: list[DiffKernelRow]
    tree: DiffTree
    distributed: DiffDistributed | None


# ---- paddle -------------------------------------------------------------------------------------
class PaddleColumns(Strict):  # Total / Avg / Max / Min / Ratio; Model Summary's "Others" has only total and ratio
    total_ns: int
    avg_ns: Number | None = None
    max_ns: int | None = None
    min_ns: int | None = None
    ratio_pct: Number


class PaddleRow(Strict):
    name: str
    calls: int | None
    cpu: PaddleColumns | None
    gpu: PaddleColumns | None


class PaddleInnerRow(PaddleRow):
    kernels: list[PaddleRow]


class PaddleOperatorRow(PaddleRow):
    inner: list[PaddleInnerRow]
    kernels: list[PaddleRow]


class PaddleTypeTime(Strict):
    type: str
    calls: int
    time_ns: int
    ratio_pct: Number


class PaddleOverview(Strict):
    cpu: list[PaddleTypeTime]
    gpu: list[PaddleTypeTime]


class PaddleTime(Strict):
    time_ns: int
    ratio_pct: Number


class PaddleMemoryRow(Strict):
    name: str
    type: str
    allocation_count: int
    free_count: int
    allocation_bytes: int
    free_bytes: int
    increased_bytes: int


class PaddleMemoryPlace(Strict):
    place: str
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    rows: list[PaddleMemoryRow]


class PaddleSummary(TraceIdent):
    """A Paddle trace's tables (``applies`` true), or for another trace ``applies`` false and the ``reason``."""

    unit: str
    unit_ns: Number
    applies: bool
    reason: str | None = None
    total_ns: int | None = None
    overview: PaddleOverview | None = None
    model: list[PaddleRow] | None = None
    distribution: dict[str, PaddleTime] | None = None
    operators: list[PaddleOperatorRow] | None = None
    kernels: list[PaddleRow] | None = None
    memory: list[PaddleMemoryPlace] | None = None
    user_defined: list[PaddleRow] | None = None
