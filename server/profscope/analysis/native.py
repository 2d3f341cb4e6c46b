"""The analysis' C extension (``_call_tree_sweep.c``), when it can be used.

It is optional: an install without a C compiler has none, and a checkout updated without rebuilding it (``pip
install -e .``) has one built from older source, without the newer functions. Either way the numpy code each
function replaces runs, with identical results (tests/test_call_tree_sweep.py, tests/test_timeline.py,
tests/test_intervals.py), only slower; an outdated build is said once in the log.
"""

from __future__ import annotations

import logging
from functools import cache
from types import ModuleType

FUNCTIONS = (
    "sweep",
    "nest_in_row_order",
    "tree_down",
    "tree_up",
    "merge_aliases",
    "lane_depths",
    "merge_levels",
    "merge_flagged",
    "paint_normalised",
)


@cache
def call_tree_sweep() -> ModuleType | None:
    try:
        from profscope.analysis import _call_tree_sweep
    except ImportError:  # built without a compiler
        return None
    missing = [name for name in FUNCTIONS if not hasattr(_call_tree_sweep, name)]
    if missing:
        logging.getLogger("profscope").warning(
            "the analysis extension was built from older source (no %s): numpy runs instead; rebuild it with "
            "`pip install -e .`",
            ", ".join(missing),
        )
        return None
    return _call_tree_sweep
