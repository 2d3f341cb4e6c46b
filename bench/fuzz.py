"""Long fuzzing run of the trace parser and the snapshot loader (the engine of tests/hostile/fuzzing.py).

    nice python bench/fuzz.py --seconds 600 [--target trace|snapshot|both] [--cases N] [--seed S] [--save DIR]

Case i of a target uses ``Random(seed + i)``, so any case replays from its number. A crash is any
exception other than the loader's documented refusal, or a case running longer than 20 s (every
payload builder also runs on what the loader accepted). Prints one JSON line per target: cases
run, accepted, refused, crashes, and the distinct crashes (last line of the traceback and where);
``--save`` writes each crashing input there.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from random import Random

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

from hostile import fuzzing  # noqa: E402  (the tests folder is not a package on the path by default)

TARGETS = {
    "trace": (fuzzing.trace_case, fuzzing.run_trace_case),
    "snapshot": (fuzzing.snapshot_case, fuzzing.run_snapshot_case),
}


def _crash_key(trace: str) -> str:
    lines = trace.strip().splitlines()
    where = next((line.strip() for line in reversed(lines) if line.strip().startswith("File ")), "?")
    return f"{lines[-1][:200]} @ {where}"


def fuzz(target: str, seed: int, cases: int | None, seconds: float, save: Path | None) -> dict:
    make_case, run_case = TARGETS[target]
    deadline = time.monotonic() + seconds
    crashes: Counter[str] = Counter()
    first_case: dict[str, int] = {}
    ran = accepted = 0
    while (cases is None or ran < cases) and time.monotonic() < deadline:
        case_seed = seed + ran
        data = make_case(Random(case_seed))
        outcome = run_case(data)
        ran += 1
        accepted += outcome.accepted
        if outcome.crash is not None:
            key = _crash_key(outcome.crash)
            crashes[key] += 1
            first_case.setdefault(key, case_seed)
            if save is not None:
                save.mkdir(parents=True, exist_ok=True)
                (save / f"{target}-{case_seed}.bin").write_bytes(data)
    return {
        "target": target,
        "cases": ran,
        "accepted": accepted,
        "refused": ran - accepted,
        "crashes": sum(crashes.values()),
        "distinct_crashes": [{"crash": k, "count": n, "first_seed": first_case[k]} for k, n in crashes.most_common()],
        "seconds": round(seconds - max(0.0, deadline - time.monotonic()), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=[*TARGETS, "both"], default="both")
    parser.add_argument("--cases", type=int, default=None, help="cases per target (default: until --seconds)")
    parser.add_argument("--seconds", type=float, default=60.0, help="time per target (default 60)")
    parser.add_argument("--seed", type=int, default=0, help="case i uses Random(seed + i)")
    parser.add_argument("--save", type=Path, default=None, help="write crashing inputs to this folder")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)  # payload builders log what they skip; the counts are the result here
    warnings.simplefilter("ignore")
    targets = list(TARGETS) if args.target == "both" else [args.target]
    failed = False
    for target in targets:
        result = fuzz(target, args.seed, args.cases, args.seconds, args.save)
        print(json.dumps(result), flush=True)
        failed = failed or bool(result["crashes"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
