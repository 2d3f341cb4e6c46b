"""What a view module declares: its page, its JSON twin's router, its cached queries, when it applies to a run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastapi import APIRouter

from profscope.analysis.payloads import Query
from profscope.catalog import RunFacts  # what the server knows of a run; the views' `applies` read it

IDENT = "run={run}&worker={worker}&span={span}"  # how the pages write (run, worker, span) in their requests
NO_TRACE = "This run holds only memory snapshots or memory.log files: see Memory"


def always(_: RunFacts) -> str | None:
    return None


def needs_a_trace(facts: RunFacts) -> str | None:
    return None if facts.traces else NO_TRACE


@dataclass(frozen=True)
class View:
    """One page: ``name`` is its path (``/name``) and its key in ``/api/runs``'s ``views``; ``label`` its tab.

    ``stored``: results the ingest writes besides its queries' that the page reads (the Trace view's index);
    the view is ready (``/api/runs``'s ``view_states``) once its queries and these are there for every file.
    ``run_tab``: the page shows one run and has a tab in the nav, available when ``applies`` returns
    None, otherwise greyed out with the reason as its tooltip. ``path`` and ``in_nav`` are for the pages
    that are not per run (the list of runs, a source file).
    ``first_request``: the API request the page's script makes first when its URL names only the run (and
    worker, span), exactly as the script writes it (``{run}``, ``{worker}``, ``{span}`` are filled in, encoded
    as the browser's ``URLSearchParams`` does). The page's HTML has the browser fetch it with the page's
    modules (``pages.first_request``), so the answer is there when the script asks: one round trip fewer
    before the content. A mismatch costs that round trip only; ``tests/browser/test_chart_bundle.py`` checks
    every page's request is the preloaded one.
    """

    name: str
    label: str
    router: APIRouter | None
    queries: tuple[Query, ...] = ()
    applies: Callable[[RunFacts], str | None] = needs_a_trace
    stored: tuple[str, ...] = ()
    run_tab: bool = True
    in_nav: bool = True
    path: str = ""
    first_request: str = ""

    @property
    def page_path(self) -> str:
        return self.path or f"/{self.name}"

    @property
    def template(self) -> str:
        return f"{self.name}.html"
