"""The Diff view: two traces' cached results joined (``docs/definitions.md`` §12).

Pure functions, small results in and a small result out, as HTA's ``TraceDiff``: nothing here reads a
trace. The inputs are each side's cached queries: ``overview`` (step time breakdown, GPU summary),
``operators.*`` and ``kernels.*`` rows, ``operators.tree`` (the folded call tree) and, for two multi-rank
runs, the Distributed view's ``ranks``.

When the sides have different step counts, counts and times are divided by each side's step count
("per step"); otherwise they are the trace's totals ("total"). The response says which.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from profscope.analysis.overview import CATEGORIES

SAME_TOLERANCE = 0.01  # a change within 1% of the larger side, with equal calls, is "same"
STEP_KEYS = ("total_us", *(f"{category}_us" for category in (*CATEGORIES, "other")))  # the average step's keys
GPU_KEYS = ("utilization_pct", "est_sm_efficiency_pct", "est_achieved_occupancy_pct", "tensor_cores_pct")
OPERATOR_VALUES = ("calls", "host_self_us", "host_total_us", "device_self_us", "device_total_us")
DEVICE_VALUES = ("device_self_us", "device_total_us")
KERNEL_VALUES = ("calls", "total_us")
TREE_VALUES = ("calls", "host_total_us", "host_self_us", "device_total_us", "device_self_us")
RANK_VALUES = (
    "computation_us",
    "overlapping_us",
    "communication_us",
    "other_us",
    "synchronizing_us",
    "data_transfer_us",
)
Row = dict[str, Any]


# ---- sides ----------------------------------------------------------------------------------------
def step_count(overview: Row) -> int:
    return len(overview.get("steps") or [])


def normalisation(base_steps: int, target_steps: int) -> str:
    """``per_step`` when the step counts differ (and both have steps), else ``total``."""
    return "per_step" if base_steps != target_steps and base_steps > 0 and target_steps > 0 else "total"


def has_device(overview: Row, kernel_rows: list[Row]) -> bool:
    """A side records device activity: GPU kernels (a CPU-only trace has none, so its device times are unknown)."""
    return bool(overview.get("gpus")) or bool(kernel_rows)


# ---- step time -------------------------------------------------------------------------------------
def diff_steps(base: Row, target: Row) -> Row:
    """The average step of each side per category, the delta (target - base), and the GPU summary of each."""
    base_average = {key: base["average"].get(key, 0.0) for key in STEP_KEYS}
    target_average = {key: target["average"].get(key, 0.0) for key in STEP_KEYS}
    return {
        "base": base_average,
        "target": target_average,
        "delta": {key: target_average[key] - base_average[key] for key in STEP_KEYS},
        "base_steps": step_count(base),
        "target_steps": step_count(target),
        "gpus": {"base": _gpus(base), "target": _gpus(target)},
    }


def _gpus(overview: Row) -> list[Row]:
    return [{"device": gpu["device"], **{key: gpu.get(key) for key in GPU_KEYS}} for gpu in overview.get("gpus", [])]


# ---- tables ----------------------------------------------------------------------------------------
def join_rows(
    base: Iterable[Row],
    target: Iterable[Row],
    key: Callable[[Row], tuple],
    values: tuple[str, ...],
    change: str,
    scale: tuple[float, float] = (1.0, 1.0),
    unknown: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
) -> list[Row]:
    """Rows of both sides joined on ``key``: ``base_<v>`` / ``target_<v>`` for every value (divided by the
    side's ``scale``, its step count when normalised per step; None for the ``unknown`` values of a side,
    e.g. device times of a CPU-only trace), ``delta_us`` and ``ratio`` of ``change``, and the status.
    Sorted by the largest absolute change first."""
    base_by_key, target_by_key = _summed(base, key, values), _summed(target, key, values)
    rows = []
    for joined_key in base_by_key.keys() | target_by_key.keys():
        sides = (base_by_key.get(joined_key), target_by_key.get(joined_key))
        row: Row = dict(zip(("name", "detail"), joined_key, strict=False))
        for label, side, divisor, missing in zip(("base", "target"), sides, scale, unknown, strict=True):
            for value in values:
                if value in missing:
                    row[f"{label}_{value}"] = None
                else:
                    row[f"{label}_{value}"] = side[value] / divisor if side is not None else 0.0
        rows.append({**row, **_change(row, sides, change)})
    rows.sort(key=lambda r: (-abs(r["delta_us"] or 0.0), r["name"], str(r.get("detail"))))
    return rows


def _summed(rows: Iterable[Row], key: Callable[[Row], tuple], values: tuple[str, ...]) -> dict[tuple, Row]:
    """Rows summed by key (a grouping coarser than the cached one, e.g. kernel + launching op)."""
    out: dict[tuple, Row] = {}
    for row in rows:
        sums = out.setdefault(key(row), dict.fromkeys(values, 0.0))
        for value in values:
            sums[value] += row.get(value) or 0.0
    return out


def _change(row: Row, sides: tuple[Row | None, Row | None], change: str) -> Row:
    base, target = row[f"base_{change}"], row[f"target_{change}"]
    if sides[0] is None:
        status = "added"
    elif sides[1] is None:
        status = "removed"
    elif base is None or target is None:
        status = "changed" if row["base_calls"] != row["target_calls"] else "same"
    else:
        same_calls = row["base_calls"] == row["target_calls"]
        status = (
            "same" if same_calls and abs(target - base) <= SAME_TOLERANCE * max(abs(base), abs(target)) else "changed"
        )
    if base is None or target is None:
        return {"delta_us": None, "ratio": None, "status": status}
    return {"delta_us": target - base, "ratio": target / base if base else None, "status": status}


def operator_change(base_device: bool, target_device: bool) -> str:
    """The time a row's delta is of: device self time when both sides ran on a GPU, else host self time."""
    return "device_self_us" if base_device and target_device else "host_self_us"


def diff_operators(
    base: list[Row], target: list[Row], by_shape: bool, scale: tuple[float, float], device: tuple[bool, bool]
) -> list[Row]:
    def key(row: Row) -> tuple:
        return (row["name"], row.get("input_shape") or "") if by_shape else (row["name"],)

    unknown = tuple(() if on_device else DEVICE_VALUES for on_device in device)
    rows = join_rows(base, target, key, OPERATOR_VALUES, operator_change(*device), scale, unknown)  # type: ignore[arg-type]
    return [
        {**_renamed(row, "detail", "input_shape"), "input_shape": row.get("detail") if by_shape else None}
        for row in rows
    ]


def diff_kernels(base: list[Row], target: list[Row], by_operator: bool, scale: tuple[float, float]) -> list[Row]:
    def key(row: Row) -> tuple:
        return (row["name"], row.get("operator") or "") if by_operator else (row["name"],)

    rows = join_rows(base, target, key, KERNEL_VALUES, "total_us", scale)
    return [
        {**_renamed(row, "detail", "operator"), "operator": row.get("detail") if by_operator else None} for row in rows
    ]


def _renamed(row: Row, old: str, new: str) -> Row:
    return {(new if k == old else k): v for k, v in row.items()}


# ---- call tree ------------------------------------------------------------------------------------
def tree_children(nodes: Row, path: list[str]) -> tuple[list[int] | None, Row | None]:
    """The indexes of the children of the folded node at ``path`` (names from the top level), and that node's
    values (None at the top); None, None when the path does not exist in this tree."""
    parents = nodes["parent"]
    current = -1
    for name in path:
        found = next((i for i, p in enumerate(parents) if p == current and nodes["name"][i] == name), None)
        if found is None:
            return None, None
        current = found
    node = None if current < 0 else _tree_row(nodes, current)
    return [i for i, p in enumerate(parents) if p == current], node


def _tree_row(nodes: Row, index: int) -> Row:
    return {"name": nodes["name"][index], "kind": nodes["kind"][index], **{v: nodes[v][index] for v in TREE_VALUES}}


def diff_tree(base: Row, target: Row, path: list[str], scale: tuple[float, float], device: tuple[bool, bool]) -> Row:
    """One level of the two call trees compared: the node at ``path`` and its children joined by name and kind,
    each with whether it has children to drill into. Ops change by host total time (what a user sees get
    slower, whatever ran on the GPU), the kernels, memcpys and memsets under an op by device time."""
    base_children, base_node = tree_children(base, path)
    target_children, target_node = tree_children(target, path)
    base_parents, target_parents = set(base["parent"]), set(target["parent"])
    base_rows = [{**_tree_row(base, i), "parent_of": i in base_parents} for i in base_children or []]
    target_rows = [{**_tree_row(target, i), "parent_of": i in target_parents} for i in target_children or []]
    drillable = {(r["name"], r["kind"]) for r in base_rows + target_rows if r["parent_of"]}
    unknown = tuple(() if on_device else DEVICE_VALUES for on_device in device)

    def joined(base_side: list[Row], target_side: list[Row], op: bool) -> list[Row]:
        pick = (
            [r for r in base_side if (r["kind"] == "op") == op],
            [r for r in target_side if (r["kind"] == "op") == op],
        )
        change = "host_total_us" if op else "device_total_us"
        rows = join_rows(*pick, lambda r: (r["name"], r["kind"]), TREE_VALUES, change, scale, unknown)  # type: ignore[arg-type]
        return [{**_renamed(r, "detail", "kind"), "has_children": (r["name"], r["detail"]) in drillable} for r in rows]

    node = joined([base_node] if base_node else [], [target_node] if target_node else [], op=True)
    return {
        "path": path,
        "found": base_children is not None or target_children is not None,
        "node": node[0] if node else None,
        "children": joined(base_rows, target_rows, op=True) + joined(base_rows, target_rows, op=False),
    }


# ---- distributed ----------------------------------------------------------------------------------
def diff_ranks(base: list[Row], target: list[Row]) -> list[Row]:
    """Per rank (joined on the rank number): the average step's computation / overlap / communication / other
    and synchronizing / data transfer of each side, and the delta."""
    base_by_rank = {row["rank"]: row for row in base}
    target_by_rank = {row["rank"]: row for row in target}
    out = []
    for rank in sorted(base_by_rank.keys() | target_by_rank.keys(), key=lambda r: (r is None, r)):
        b, t = base_by_rank.get(rank), target_by_rank.get(rank)
        row: Row = {"rank": rank, "base_worker": b and b["worker"], "target_worker": t and t["worker"]}
        for value in RANK_VALUES:
            base_value = b.get(value) if b else None
            target_value = t.get(value) if t else None
            row[f"base_{value}"] = base_value
            row[f"target_{value}"] = target_value
            row[f"delta_{value}"] = (
                target_value - base_value if base_value is not None and target_value is not None else None
            )
        out.append(row)
    return out
