"""Write docs/faults.md: run every scenario of tests/faultsuite.py and tabulate what the user saw.

    python docs/gen_faults.py           # regenerate docs/faults.md
    python docs/gen_faults.py --check   # exit 1 when docs/faults.md is not what the suite produces

Takes about a minute on two cores (one scenario sends SIGTERM to a real `clbench run` subprocess).
``tests/test_trust.py`` fails when docs/faults.md is out of date.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "faults.md"


def generate() -> str:
    sys.path.insert(0, str(ROOT / "tests"))  # as pytest imports it: the module is `faultsuite`
    import faultsuite

    with tempfile.TemporaryDirectory(prefix="clbench-faults-") as tmp:
        return faultsuite.render(Path(tmp))


def main(argv: list[str]) -> int:
    text = generate()
    if "--check" in argv:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC.relative_to(ROOT)} is stale; run `python docs/gen_faults.py`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)} ({text.strip().splitlines()[-1].strip('*')})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
