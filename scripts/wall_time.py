"""Record how long a `clbench run` took into TREE/wall-time.json (what docs generators read): its command, wall
seconds, the cells in the tree and their summed seconds, the CPU and the date. ``--add``: the run added cells to a
tree that already has a record; its command and wall time are added to it. ``--rerun``: the run replaced some of the
tree's cells (the rows whose presets a retuning moved); the record keeps its run and lists the rerun beside it.

    /usr/bin/time -f %e -o t clbench run ... --out TREE; python scripts/wall_time.py TREE --command "..." --wall-s "$(cat t)"
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split()[:2])
    except OSError:
        pass
    return platform.processor() or "unknown"


def _jobs(command: str) -> str:
    """The run's ``--jobs`` as its command gives it (``auto`` when it gives none)."""
    words = command.replace("=", " ").split()
    return next((words[k + 1] for k, w in enumerate(words[:-1]) if w in ("--jobs", "-j")), "auto")


def _joined(old: str | None, new: str) -> str:
    """``old``'s comma-separated values and ``new``, each once, in order."""
    return ", ".join(dict.fromkeys([*(old.split(", ") if old else []), new]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("--command", required=True)
    parser.add_argument("--wall-s", type=float, required=True)
    parser.add_argument("--beside", default="", help="what else ran on the machine meanwhile (an upper bound then)")
    parser.add_argument("--add", action="store_true")
    parser.add_argument("--rerun", type=int, metavar="CELLS", help="the run reran this many of the tree's cells")
    args = parser.parse_args()
    path = args.tree / "wall-time.json"
    if args.rerun is not None:
        record = json.loads(path.read_text())
        record.setdefault("reruns", []).append(
            {
                "command": args.command,
                "cells": args.rerun,
                "wall_s": round(args.wall_s, 1),
                "date": datetime.date.today().isoformat(),
                **({"beside": args.beside} if args.beside else {}),
            }
        )
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {path}")
        return
    old = json.loads(path.read_text()) if args.add and path.is_file() else {}
    reruns = old.pop("reruns", [])
    results = [json.loads(p.read_text()) for p in args.tree.rglob("result.json")]
    record = {
        "command": "; ".join(c for c in (old.get("command"), args.command) if c),
        "jobs": _joined(old.get("jobs"), _jobs(args.command)),
        "cells": len(results),
        "wall_s": round(old.get("wall_s", 0.0) + args.wall_s, 1),
        "cells_s": round(sum(r["timings"]["total_s"] for r in results), 1),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        # torch's CPU kernels of the tree's cells (a cell made before results recorded them: "unrecorded")
        "cpu_capability": ", ".join(
            sorted({str(r.get("env", {}).get("cpu_capability") or "unrecorded") for r in results})
        ),
        "date": _joined(old.get("date"), datetime.date.today().isoformat()),
        **(
            {"beside": "; ".join(b for b in (old.get("beside"), args.beside) if b)}
            if args.beside or old.get("beside")
            else {}
        ),
    }
    if reruns:
        record["reruns"] = reruns
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
