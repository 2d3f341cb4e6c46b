"""Registry of view payloads computed once per trace, at ingest, in the worker process.

Each analysis module registers the payloads it offers with ``@payload("name")``; the ingest job
computes all of them and caches them as JSON, so a page request only reads a file. Payloads of
allocator snapshots register with ``kind="snapshot"`` and receive the snapshot's tables.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from profscope.analysis.context import TraceContext

PayloadBuilder = Callable[[TraceContext], Any]
_REGISTRY: dict[str, dict[str, PayloadBuilder]] = {"trace": {}, "snapshot": {}}


def payload(name: str, kind: str = "trace") -> Callable[[PayloadBuilder], PayloadBuilder]:
    def register(builder: PayloadBuilder) -> PayloadBuilder:
        _REGISTRY[kind][name] = builder
        return builder

    return register


def registered(kind: str = "trace") -> dict[str, PayloadBuilder]:
    """All payload builders of one kind ("trace" or "snapshot") of every module in ``profscope.analysis``."""
    import profscope.analysis as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    return dict(_REGISTRY[kind])
