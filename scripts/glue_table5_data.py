"""Prepare the CL benchmark's GLUE-style tasks for ``glue-cl`` (used by scripts/glue_table5_run.sh).

The stored MNLI test set (GLUE's matched dev set) keeps GLUE's 131 records labelled ``-`` (no annotator
consensus; GLUE scores them nowhere), which the CL-benchmark loader refuses. This writes a copy of the six
tasks' folders under OUT with those records dropped; every other file is copied unchanged (the loader
refuses symlinks that leave its data folder).

    python scripts/glue_table5_data.py SRC OUT   # SRC: the CL_Benchmark folder or its parent
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

TASKS = {"MNLI": "NLI", "QQP": "QQP", "RTE": "NLI", "SST-2": "SC", "CB": "NLI", "BoolQA": "BoolQA"}
NO_GOLD = "-"


def prepare(src: Path, out: Path) -> dict[str, int]:
    """Copy the tasks' files; return, per file rewritten, the records dropped."""
    root = src / "CL_Benchmark" if (src / "CL_Benchmark").is_dir() else src
    dropped: dict[str, int] = {}
    for task, group in TASKS.items():
        target = out / group / task
        target.mkdir(parents=True, exist_ok=True)
        for f in sorted((root / group / task).iterdir()):
            dest = target / f.name
            dest.unlink(missing_ok=True)
            records = json.loads(f.read_text(encoding="utf-8")) if f.name != "labels.json" else None
            kept = [r for r in records if r.get("label") != NO_GOLD] if records is not None else None
            if records is None or kept is None or len(kept) == len(records):
                shutil.copyfile(f, dest)
            else:
                dest.write_text(json.dumps(kept, ensure_ascii=False), encoding="utf-8")
                dropped[f"{group}/{task}/{f.name}"] = len(records) - len(kept)
    return dropped


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(json.dumps(prepare(Path(sys.argv[1]), Path(sys.argv[2]))))
