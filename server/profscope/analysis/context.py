"""Shared, lazily built structures of one trace that several views read (call tree, steps)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

from profscope.analysis.call_tree import CallTree, build_call_tree
from profscope.analysis.steps import Steps, find_steps
from profscope.tables import TraceTables


class TraceContext:
    def __init__(self, tables: TraceTables) -> None:
        self.tables = tables
        self._memo: dict[str, Any] = {}

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """A value several payloads need, computed once per trace."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @cached_property
    def tree(self) -> CallTree:
        return build_call_tree(self.tables)

    @cached_property
    def steps(self) -> Steps:
        return find_steps(self.tables, self.tree)
