"""Long random run of tests/test_api_generated.py: a fresh seed each time, printed so a failure replays.

    python bench/api_fuzz.py [--examples 500] [--seed N]

CI runs the same test derandomized with 30 examples per operation; this drives every operation with
many more generated inputs. To replay a failure: ``--seed N`` with the printed N (and the same
``--examples``).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500, help="generated inputs per API operation")
    parser.add_argument("--seed", type=int, default=None, help="replay this seed (default: a new random one)")
    args = parser.parse_args()
    chosen = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"seed {chosen}, {args.examples} examples per operation: replay with --seed {chosen}", flush=True)
    env = {**os.environ, "PROFSCOPE_API_SEED": str(chosen), "PROFSCOPE_API_EXAMPLES": str(args.examples)}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "tests/test_api_generated.py", "-k", "generated_requests"]
    return subprocess.call(command, cwd=REPO, env=env)


if __name__ == "__main__":
    raise SystemExit(main())
