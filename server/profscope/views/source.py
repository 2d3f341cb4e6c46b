"""The Source page: one file of the profiled program, at a line (linked from call stacks)."""

from __future__ import annotations

from profscope.api.source import router
from profscope.views.view import View, always

VIEW = View("source", "Source", router, applies=always, run_tab=False, in_nav=False)
