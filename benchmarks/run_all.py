"""Run every benchmark in this folder, one subprocess each, and print their reports in turn.

    python benchmarks/run_all.py [NAME ...]        # e.g. overhead lps_admm; default: all

Benchmarks print ratios against a baseline measured in the same run; none of them asserts a time.
``bench_vs_avalanche`` and ``bench_vs_avalanche_methods`` run only when ``AVALANCHE_PYTHON`` names the python of an
environment with avalanche-lib 0.6 (see their docstrings).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main(names: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if names:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in names]
    failed = []
    for script in scripts:
        args = []
        if script.stem.startswith("bench_vs_avalanche"):
            if not os.environ.get("AVALANCHE_PYTHON"):
                print(f"== {script.name}: skipped (set AVALANCHE_PYTHON)\n", flush=True)
                continue
            args = ["--avalanche-python", os.environ["AVALANCHE_PYTHON"]]
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script), *args], check=False).returncode != 0:
            failed.append(script.name)
        print(flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
