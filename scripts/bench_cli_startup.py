"""How long `patcher --help` (and friends) take to start: the target is well under 1 s.

    python scripts/bench_cli_startup.py [--repeat N]

Runs each command N times in a fresh interpreter and prints the best and median wall time.
No `--help` imports torch or transformers (`patch --help` imports libcst, ~0.2 s: its rules list
comes from the rule modules).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = [["--help"], ["--version"], ["trace", "--help"], ["repair", "--help"], ["patch", "--help"],
            ["graph", "--help"], ["plan", "--help"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    # the checkout first; what PYTHONPATH held (packages installed with pip --target) after it
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    for command in COMMANDS:
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "patcher", *command], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            times.append(time.perf_counter() - start)
        print(f"patcher {' '.join(command):<16} best {min(times):6.3f} s  median {statistics.median(times):6.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
