"""Views of an InternLM ``memory.log`` (read by ``ingest/memory_log.py``): the memory curve and layer sunbursts.

The curve has the profiler memory view's shape (``[[t_us, allocated_bytes, reserved_bytes], ...]``,
downsampled per pixel column without losing a peak): t is the log's time since the profiler started,
allocated its ``total_memory`` (parameters + gradients + optimizer parameters and state + activations,
as tensor sizes); the log knows nothing of the allocator's cache, so reserved is null. Each category
has its own series beside it.

A sunburst per category shows its last logged layout by module path: parameters, gradients,
optimizer (the optimizer's parameter copies and its state, InternLM's ``os_memory_sunburst``) and
activations (one tree per model chunk). A node's value is its own bytes plus its subtree's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profscope.analysis.memory import peak_preserving
from profscope.ingest.memory_log import CATEGORIES, MemoryLog

US_PER_S = 1_000_000
CATEGORY_LABELS = {
    "params": "parameters",
    "grads": "gradients",
    "os_params": "optimizer parameters",
    "os_state": "optimizer state",
    "activation": "activations",
}
SUNBURSTS = {  # sunburst category -> the layouts it draws
    "params": ("params",),
    "grads": ("grads",),
    "optimizer": ("os_params", "os_state"),
    "activations": ("activation_base",),
}
SUNBURST_LABELS = {"params": "parameters", "grads": "gradients", "optimizer": "optimizer", "activations": "activations"}


def log_summary(log: MemoryLog) -> dict[str, Any]:
    total = np.asarray(log.total_bytes, dtype=np.int64)
    peak = int(np.argmax(total)) if len(total) else None
    return {
        "points": log.points,
        "peak_allocated_bytes": int(total[peak]) if peak is not None else None,
        "peak_reserved_bytes": None,
        "peak_time_us": log.time_s[peak] * US_PER_S if peak is not None else None,
        "categories": [{"category": name, "label": CATEGORY_LABELS[name]} for name in CATEGORIES],
        "peaks": {name: max(values, default=None) for name, values in log.category_bytes.items()},
        "at_peak": {name: values[peak] if peak is not None else None for name, values in log.category_bytes.items()},
        "sunbursts": [
            {"category": name, "label": SUNBURST_LABELS[name]}
            for name, layouts in SUNBURSTS.items()
            if any(layout in log.layouts for layout in layouts)
        ],
        "warnings": log.warnings,
    }


def log_curve(
    log: MemoryLog, start_us: float | None = None, end_us: float | None = None, width_px: int = 1500
) -> dict[str, Any]:
    """Total bytes over time in the window, at most ~4 points per pixel column, and each category's bytes."""
    times = np.asarray(log.time_s, dtype=np.float64) * US_PER_S
    total = np.asarray(log.total_bytes, dtype=np.int64)
    low = start_us if start_us is not None else (float(times[0]) if len(times) else 0.0)
    high = end_us if end_us is not None else (float(times[-1]) if len(times) else 0.0)
    window = np.flatnonzero((times >= low) & (times <= high))
    shown = window
    if len(window) > 4 * width_px:
        shown = window[peak_preserving(times[window], low, high, width_px, (total[window], -total[window]))]
    return {
        "window_us": [float(low), float(high)],
        "points_in_window": len(window),
        "curve": [[float(times[i]), int(total[i]), None] for i in shown.tolist()],
        "category_curve": {name: np.asarray(values)[shown].tolist() for name, values in log.category_bytes.items()},
    }


def layer_tree(log: MemoryLog, category: str) -> dict[str, Any]:
    """Sunburst columns (``ids``, ``labels``, ``parents``, ``values`` in bytes) of one category.

    The tree comes from the module paths; values are summed from each node's own bytes (the log's
    per-node totals are rounded to 0.01 MB, so their sums would not always add up).
    """
    layouts = [log.layouts[name] for name in SUNBURSTS[category] if name in log.layouts]
    own: dict[str, int] = {}
    for layout in layouts:
        for path, size in zip(layout.paths, layout.own_bytes, strict=True):
            parts = path.split(".")
            for depth in range(1, len(parts)):
                own.setdefault(".".join(parts[:depth]), 0)
            own[path] = size
    totals = dict.fromkeys(own, 0)
    for path, size in own.items():
        parts = path.split(".")
        for depth in range(1, len(parts) + 1):
            totals[".".join(parts[:depth])] += size
    roots = [path for path in own if "." not in path]
    center = roots[0] if len(roots) == 1 else category
    ids, labels, parents, values = [], [], [], []
    if len(roots) != 1:
        ids.append(center)
        labels.append(SUNBURST_LABELS[category])
        parents.append("")
        values.append(sum(totals[root] for root in roots))
    for path in own:
        ids.append(path)
        labels.append(SUNBURST_LABELS[category] if path == center else path.rsplit(".", 1)[-1])
        parents.append("" if path == center else (path.rsplit(".", 1)[0] if "." in path else center))
        values.append(totals[path])
    point = max((layout.point for layout in layouts), default=None)
    return {
        "category": category,
        "label": SUNBURST_LABELS[category],
        "layouts": [name for name in SUNBURSTS[category] if name in log.layouts],
        "time_us": log.time_s[point] * US_PER_S if point is not None else None,
        "total_bytes": values[0] if values else 0,
        "ids": ids,
        "labels": labels,
        "parents": parents,
        "values": values,
    }
