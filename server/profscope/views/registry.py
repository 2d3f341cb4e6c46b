"""The registry of views: the nav, the page and API routes, the tabs' availability and ``/api/runs``'s ``views``
all come from this list, in this order (the nav's). Adding a view is one line here."""

from __future__ import annotations

from profscope.analysis.payloads import Query, unique_queries
from profscope.views import (
    diff,
    distributed,
    kernels,
    memory,
    modules,
    operators,
    overview,
    paddle,
    runs,
    source,
    trace,
)
from profscope.views.view import View

VIEWS: tuple[View, ...] = (
    runs.VIEW,
    overview.VIEW,
    operators.VIEW,
    kernels.VIEW,
    modules.VIEW,
    memory.VIEW,
    distributed.VIEW,
    paddle.VIEW,
    diff.VIEW,
    trace.VIEW,
    source.VIEW,
)


def queries(kind: str | None = None) -> tuple[Query, ...]:
    """Every cached query of the views (of one kind: "trace" or "snapshot"), each once."""
    unique = unique_queries(query for view in VIEWS for query in view.queries)
    return tuple(query for query in unique if kind is None or query.kind == kind)
