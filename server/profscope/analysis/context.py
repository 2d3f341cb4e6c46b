"""Shared, lazily built structures of one trace that several views read (call tree, steps)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

from profscope.analysis.call_tree import CallTree, RuntimeLaunches, build_call_tree, runtime_launches
from profscope.analysis.steps import Steps, find_steps
from profscope.tables import TraceTables


class TraceContext:
    def __init__(
        self,
        tables: TraceTables,
        tree: Callable[[], CallTree] | None = None,
        launches: Callable[[], RuntimeLaunches] | None = None,
    ) -> None:
        """``tree``, ``launches``: where the call tree and the runtime launches come from when they are built
        elsewhere (the worker builds them on a thread while its first job computes what needs no tree:
        ``parallel_queries.TreeBuilding``); else each is built here, when first asked for."""
        self.tables = tables
        self._memo: dict[str, Any] = {}
        self._tree = tree
        self._launches = launches

    def on(self, tables: TraceTables) -> TraceContext:
        """This context over ``tables``, the same trace's (its saved tables, read from their files): with the call
        tree and the steps found so far; not the memos, which may hold columns of the tables they were computed
        from, nor the launches, which the queries do not read (found again if asked for)."""
        context = TraceContext(tables, tree=self._tree)
        for shared in ("tree", "steps"):
            if shared in self.__dict__:
                context.__dict__[shared] = self.__dict__[shared]
        return context

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """A value several payloads need, computed once per trace."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @cached_property
    def launches(self) -> RuntimeLaunches:
        return self._launches() if self._launches is not None else runtime_launches(self.tables)

    @cached_property
    def tree(self) -> CallTree:
        return self._tree() if self._tree is not None else build_call_tree(self.tables, self.launches)

    @cached_property
    def steps(self) -> Steps:
        return find_steps(self.tables, self.launches)
