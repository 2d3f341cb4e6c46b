"""Fuzz the trace parser and the snapshot loader from corpus seeds, a fixed number of cases each.

Hypothesis drives the mutators through a ``random.Random`` it controls, so a crash shrinks to a
small sequence of mutations and replays from its database. ``bench/fuzz.py`` runs the same engine
for much longer; its results are in bench/RESULTS.md ("Reliability").
"""

from __future__ import annotations

from random import Random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fuzzing import run_snapshot_case, run_trace_case, snapshot_case, trace_case

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@FUZZ
@given(st.randoms(use_true_random=False))
def test_the_trace_parser_and_every_view_never_crash(rng: Random) -> None:
    outcome = run_trace_case(trace_case(rng))
    assert outcome.crash is None, outcome.crash


@FUZZ
@given(st.randoms(use_true_random=False))
def test_the_snapshot_loader_and_every_view_never_crash(rng: Random) -> None:
    outcome = run_snapshot_case(snapshot_case(rng))
    assert outcome.crash is None, outcome.crash
