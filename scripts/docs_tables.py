#!/usr/bin/env python3
"""Regenerate the tables of docs/lora-family.md and README.md that come from committed results, never typed.

Each generated table sits between two markers in the document:

    <!-- generated: NAME (scripts/docs_tables.py) -->
    ...                                   (replaced on every run)
    <!-- end generated: NAME -->

    python scripts/docs_tables.py            # rewrite the generated sections in place
    python scripts/docs_tables.py --check    # write nothing; exit 1 when the document differs (CI)

Sections (all from ``results/quick/cl-quick/*/order-1/seed-0``, the LoRA-family cells of the quick profile):

- ``cl-quick-cells``: AA, F.Ra, OO, AWOM, GSR, ACR and ‖A_T‖_F as recorded in each cell's result.json.
- ``quick-excerpt`` (README.md): the AA and F.Ra `avg` columns of every quick stream.
- ``quick-size`` (README.md): the committed quick default's cell count per stream.
- ``reproducibility`` (README.md): how far the quick cells move with AVX2 kernels or another thread count
  (``results/reproducibility/*``, result.json only, compared with ``clbench.verify.compare``).
- ``acr-tau``: ACR recomputed from each cell's committed ``footprints.safetensors`` at several τ, with the
  metric plugin's own function; the recomputed value at the cell's recorded τ must equal its recorded ACR.

Exit status: 0 written / up to date, 1 stale (``--check``), 2 cannot generate (no footprints, broken markers).
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "lora-family.md"
RESULTS = ROOT / "results" / "quick"
STREAM, ORDER, SEED = "cl-quick", "1", 0
TAUS = (1e-4, 1e-3, 1e-2, 0.1, 0.3)
CLAIM_OVER, CLAIM_FACTOR = ("olora", "seqlora"), 10.0  # issue 4: ACR(nlora) ≥ 10× below ACR(olora) and ACR(seqlora)
RECORDED_RTOL = 1e-6  # the recomputed ACR at the recorded τ against result.json (same inputs, same code)

BEGIN = "<!-- generated: {name} (scripts/docs_tables.py) -->"
END = "<!-- end generated: {name} -->"
_MARK = re.compile(r"^<!-- (?P<end>end )?generated: (?P<name>[A-Za-z0-9_.-]+)(?(end)| \(scripts/docs_tables\.py\)) -->$")


class DocsTableError(Exception):
    """The document cannot be generated (markers, or the results it is generated from)."""


class MissingFootprints(DocsTableError):
    """A cell the tables need has no committed footprints.safetensors."""


# --------------------------------------------------------------------------- markers
def replace_sections(text: str, sections: Mapping[str, str]) -> str:
    """``text`` with the body between each pair of markers replaced by ``sections[NAME]``.

    Every name in ``sections`` must have exactly one begin marker and one end marker after it, each alone on
    its line, not nested in another section; a marker whose name is not in ``sections`` is an error too (a
    section nobody regenerates would silently go stale)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    current: str | None = None
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        mark = _MARK.match(line.rstrip("\n"))
        if mark is None:
            if line.lstrip().startswith(("<!-- generated:", "<!-- end generated:")):
                raise DocsTableError(f"line {number}: malformed marker {line.strip()!r}; write "
                                     f"{BEGIN.format(name='NAME')!r} … {END.format(name='NAME')!r}")
            if current is None:
                out.append(line)
            continue
        name, is_end = mark["name"], bool(mark["end"])
        if not is_end:
            if current is not None:
                raise DocsTableError(f"line {number}: section {name!r} starts inside section {current!r}")
            if name in seen:
                raise DocsTableError(f"line {number}: section {name!r} appears twice")
            if name not in sections:
                raise DocsTableError(f"line {number}: no generator for section {name!r} "
                                     f"(known: {', '.join(sorted(sections)) or 'none'})")
            seen.add(name)
            current = name
            body = sections[name].strip("\n")
            out.append(BEGIN.format(name=name) + "\n")
            out.append(body + "\n" if body else "")
        else:
            if current != name:
                raise DocsTableError(f"line {number}: end of section {name!r} without its start"
                                     + (f" (inside {current!r})" if current else ""))
            out.append(END.format(name=name) + "\n")
            current = None
    if current is not None:
        raise DocsTableError(f"section {current!r} has no end marker {END.format(name=current)!r}")
    missing = sorted(set(sections) - seen)
    if missing:
        raise DocsTableError(f"no markers for section(s) {', '.join(missing)} in the document")
    return "".join(out)


def section_names(text: str) -> list[str]:
    """The names of the sections the document has begin markers for, in order."""
    return [m["name"] for line in text.splitlines() if (m := _MARK.match(line)) and not m["end"]]


# --------------------------------------------------------------------------- the cells
def _shown(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def lora_cells(results: Path, regs: Any) -> list[Any]:
    """The complete LoRA-family cells (every part of the method requires the model's "lora") of the
    stream/order/seed, sorted by method."""
    from clbench.results import iter_results

    root = results / STREAM
    if not root.is_dir():
        raise DocsTableError(f"{_shown(root)}: no such directory")
    cells = []
    for r in iter_results(root):
        if (r.stream, str(r.order), r.seed, r.status) != (STREAM, ORDER, SEED, "complete"):
            continue
        parts = r.method.split("+")
        if all(p in regs.methods and "lora" in regs.methods.get(p).requires for p in parts):
            cells.append(r)
    if not cells:
        raise DocsTableError(f"{_shown(root)}: no complete LoRA-family cell of order {ORDER}, seed {SEED}")
    return sorted(cells, key=lambda r: r.method)


def _label(r: Any) -> str:
    nlora = r.config.get("methods", {}).get("nlora")
    if not nlora:
        return f"`{r.method}`"
    form = nlora.get("penalty", "code")
    lam = nlora.get("lambda_paper" if form == "paper" else "lambda")
    return f"`{r.method}`, {form} form (λ={lam:g})" if isinstance(lam, (int, float)) else f"`{r.method}`, {form} form"


def _sig(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    s = f"{x:#.{digits}g}"
    if "e" in s:
        return f"{x:.{digits - 1}e}"
    return s.rstrip(".")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _tau(t: float) -> str:
    """1e-4 → "1e-4", 0.3 → "0.3"."""
    return f"{t:g}" if t >= 0.01 and f"{t:g}" != "0.01" else re.sub(r"e-0*(\d)", r"e-\1", f"{t:.0e}")


def _source(results: Path) -> str:
    return f"`{_shown(results)}/{STREAM}/*/order-{ORDER}/seed-{SEED}`"


def table_cells(results: Path, regs: Any) -> str:
    """The committed cells' recorded metrics."""
    cols = [("AA", "AA", _pct), ("F.Ra", "F.Ra", _pct), ("OO", "OO", _sig), ("AWOM", "AWOM", _sig),
            ("GSR", "GSR", _sig), ("ACR", "ACR (τ=1e-3)", _sig), ("A_T.norm", "‖A_T‖_F", _sig)]
    rows = [f"_From the result.json of each committed cell {_source(results)}; "
            "regenerate with `python scripts/docs_tables.py`._", "",
            "| cell | " + " | ".join(h for _, h, _ in cols) + " |",
            "|---|" + "---|" * len(cols)]
    for r in lora_cells(results, regs):
        tau = r.config.get("metrics", {}).get("tolerance", 1e-3)
        if not math.isclose(tau, 1e-3):
            raise DocsTableError(f"{r.key}: recorded τ is {_tau(tau)}, the table's ACR column says 1e-3")
        rows.append(f"| {_label(r)} | " + " | ".join(fmt(r.metrics.get(k)) for k, _, fmt in cols) + " |")
    return "\n".join(rows)


def _footprints(r: Any) -> list[Any]:
    from clbench import footprints as fps
    from clbench.results import FOOTPRINT_FILE

    path = r.path.parent / FOOTPRINT_FILE
    if not path.exists():
        raise MissingFootprints(f"{_shown(path)}: missing (ACR at other τ recomputes from the committed footprints)")
    from clbench.errors import ResultFileError

    try:
        return fps.load(path, r.footprints)  # checked against the sha256/size result.json records, when it does
    except ResultFileError as exc:
        raise DocsTableError(str(exc)) from None


def acr_at(r: Any, taus: tuple[float, ...], acr: Callable[[Any], float | None]) -> list[float | None]:
    """ACR of one cell at each τ, from its footprint file, through the metric plugin's function."""
    from clbench.metrics import MetricInput

    footprints = _footprints(r)
    samples = int(r.config.get("metrics", {}).get("samples", 0))
    matrix = [[float(v) for v in row] for row in r.accuracy_matrix]
    return [acr(MetricInput(matrix=matrix, footprints=footprints, tasks=list(r.tasks), tolerance=tau, samples=samples))
            for tau in taus]


def table_acr_tau(results: Path, regs: Any) -> str:
    """ACR against τ per cell, and the ratios the issue's claim is about (ACR of O-LoRA, SeqLoRA over N-LoRA)."""
    acr = regs.metrics.get("ACR").fn
    cells = lora_cells(results, regs)
    values: dict[str, list[float | None]] = {}
    recorded_tau: float | None = None
    for r in cells:
        tau = float(r.config.get("metrics", {}).get("tolerance", 1e-3))
        if recorded_tau is not None and not math.isclose(tau, recorded_tau):
            raise DocsTableError(f"{r.key}: recorded τ {tau:g}, other cells {recorded_tau:g}")
        recorded_tau = tau
        taus = TAUS if any(math.isclose(tau, t) for t in TAUS) else (*TAUS, tau)
        got = acr_at(r, taus, acr)
        at_recorded = got[[math.isclose(tau, t) for t in taus].index(True)]
        stored = r.metrics.get("ACR")
        if (stored is None) != (at_recorded is None) or (
                stored is not None and not math.isclose(stored, at_recorded, rel_tol=RECORDED_RTOL)):
            raise DocsTableError(f"{r.key}: ACR at the recorded τ={tau:g} recomputes to {at_recorded!r}, result.json "
                                 f"has {stored!r}: run `clbench metrics {_shown(results)} --check`")
        values[r.method] = got[:len(TAUS)]
    heads = [f"τ={_tau(t)}" + (" (recorded)" if recorded_tau is not None and math.isclose(t, recorded_tau) else "")
             for t in TAUS]
    rows = [f"_ACR recomputed from the committed `footprints.safetensors` of {_source(results)} "
            "(the ACR metric plugin at each τ, exact pass); regenerate with `python scripts/docs_tables.py`._", "",
            "| method | " + " | ".join(f"ACR {h}" if i == 0 else h for i, h in enumerate(heads)) + " |",
            "|---|" + "---|" * len(TAUS)]
    for method, vals in values.items():
        rows.append(f"| `{method}` | " + " | ".join("n/a" if v is None else f"{v:.4f}" for v in vals) + " |")
    ref = values.get("nlora")
    others = [o for o in CLAIM_OVER if o in values] if ref is not None else []
    ratio: dict[str, list[float | None]] = {}
    for other in others:
        ratio[other] = [None if a is None or b is None else math.inf if b == 0 else a / b
                        for a, b in zip(values[other], ref, strict=True)]
        cells_ = ["n/a" if x is None else "∞" if math.isinf(x) else f"{x:.2f}×" for x in ratio[other]]
        rows.append(f"| ACR(`{other}`) ÷ ACR(`nlora`) | " + " | ".join(cells_) + " |")
    if recorded_tau is not None and any(math.isclose(recorded_tau, t) for t in TAUS):
        col = [math.isclose(recorded_tau, t) for t in TAUS].index(True)
        at = [v[col] for v in values.values() if v[col] is not None]
        if at:
            rows += ["", f"At the recorded τ = {_tau(recorded_tau)}, ACR lies between {min(at):.4f} and {max(at):.4f} "
                         f"for these {len(at)} methods."]
    if len(others) == len(CLAIM_OVER):
        holds = [_tau(t) for i, t in enumerate(TAUS)
                 if all(ratio[o][i] is not None and ratio[o][i] >= CLAIM_FACTOR for o in others)]
        rows.append(f"The issue's claim, ACR(`nlora`) at least {CLAIM_FACTOR:g}× below ACR(`olora`) and ACR(`seqlora`), "
                    + (f"holds at τ = {', '.join(holds)} of these." if holds else "holds at none of these τ."))
    return "\n".join(rows)


# --------------------------------------------------------------------------- README.md
EXCERPT_METRICS = (("AA", "↑"), ("F.Ra", "↓"))


def quick_excerpt(results: Path, regs: Any) -> str:
    """The `avg` column of AA and F.Ra per stream and method (every order and seed of a cell pooled)."""
    from clbench.leaderboard import _fmt
    from clbench.results import iter_results

    cells = [r for r in iter_results(results) if r.status == "complete"]
    streams = sorted({r.stream for r in cells}, key=lambda s: (s == "cl-quick", s))
    methods = sorted({r.method for r in cells})
    seeds = sorted({r.seed for r in cells})

    def pooled(stream: str, method: str, name: str) -> list[float]:
        return [float(r.metrics[name]) for r in cells
                if r.stream == stream and r.method == method and r.metrics.get(name) is not None]

    def orders_of(stream: str) -> str:
        orders = sorted({r.order for r in cells if r.stream == stream}, key=lambda o: (len(o), o))
        return f"order {orders[0]}" if len(orders) == 1 else f"orders {', '.join(orders)} pooled"

    head = ("`avg` column of `clbench run --methods all` (seeds " + ", ".join(map(str, seeds)) + "; "
            + "; ".join(f"{s}: {orders_of(s)}" for s in streams) + "; ± is the sample std over the pooled cells). "
            "Scores in percent.\n")
    header = "| method | " + " | ".join(f"{s}: " + " / ".join(f"{m} {a}" for m, a in EXCERPT_METRICS) for s in streams) + " |"
    rows = [header, "|---|" + "---|" * len(streams)]
    for method in methods:
        cols = []
        for stream in streams:
            values = [pooled(stream, method, m) for m, _ in EXCERPT_METRICS]
            cols.append(" / ".join(_fmt(v) for v in values) if any(values) else "—")
        rows.append(f"| {method} | " + " | ".join(cols) + " |")
    return head + "\n" + "\n".join(rows)


def quick_size(results: Path, regs: Any) -> str:
    """How many cells the committed quick default has: methods × orders × seeds per stream."""
    from clbench.results import iter_results

    cells = list(iter_results(results))
    parts = []
    for stream in sorted({r.stream for r in cells}, key=lambda s: (s == "cl-quick", s)):
        mine = [r for r in cells if r.stream == stream]
        methods, orders, seeds = ({getattr(r, k) for r in mine} for k in ("method", "order", "seed"))
        parts.append(f"{len(methods)} methods × {len(orders)} order{'s' * (len(orders) > 1)} × "
                     f"{len(seeds)} seed{'s' * (len(seeds) > 1)} on `{stream}`")
    return f"The quick default is {len(cells)} cells ({'; '.join(parts)})."


# folder under results/reproducibility -> (how it was made, the one setting allowed to differ from the committed cell)
REPRO_RUNS = {
    "quick-avx2": ("AVX2 kernels instead of AVX-512: `ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 "
                   "ONEDNN_MAX_CPU_ISA=AVX2 clbench run --methods all`", None),
    "quick-threads2": ("2 threads instead of 1 on the digits streams: `clbench run --methods all --stream "
                       "split-digits,permuted-digits --set train.threads=2`", "train.threads"),
}


def reproducibility(results: Path, regs: Any) -> str:
    """How far the committed quick cells move under each change of REPRO_RUNS, per stream; and a check that the
    committed cross-machine tolerance (results/quick/TOLERANCE) covers every move."""
    from clbench.plan import config_diff, identity
    from clbench.results import iter_results
    from clbench.verify import compare, percent_metrics

    percent = percent_metrics(regs)
    committed = list(iter_results(results))
    rows = ["| change | stream | cells | identical | max \\|Δa[i][j]\\| (pp) | max \\|Δ\\| of "
            + ", ".join(sorted(percent)) + " (pp) | max relative Δ of the other metrics |",
            "|---|---|---|---|---|---|---|"]
    worst_abs = worst_rel = 0.0
    by_key = {r.key: r for r in committed}
    for folder, (how, allowed) in REPRO_RUNS.items():
        root = results.parent / "reproducibility" / folder
        if not root.is_dir():
            raise DocsTableError(f"{_shown(root)}: missing (make it with: {how})")
        other = list(iter_results(root))
        deltas, _, only_new = compare(committed, other)
        for r in other:  # each cell must differ from its committed twin in the named setting at most
            twin = by_key.get(r.key)
            diff = [] if twin is None else config_diff(identity(twin.config, r.stream, r.order, r.seed),
                                                       identity(r.config, r.stream, r.order, r.seed))
            if twin is None or any(not line.startswith(f"{allowed}:") for line in diff):
                raise DocsTableError(f"{_shown(root)}: {r.key} is not the committed cell"
                                     + (f" with {allowed} changed" if allowed else "") + f": {'; '.join(diff)}")
        for stream in sorted({d.key.split("/", 1)[0] for d in deltas}):
            ds = [d for d in deltas if d.key.startswith(stream + "/")]
            moves = [(k in percent, abs(a - b), max(abs(a), abs(b))) for d in ds for k, (a, b) in d.metrics.items()
                     if a is not None and b is not None]
            matrix = max(d.matrix for d in ds)
            pct = max((m for is_pct, m, _ in moves if is_pct), default=0.0)
            rel = max((m / scale for is_pct, m, scale in moves if not is_pct and scale), default=0.0)
            worst_abs, worst_rel = max(worst_abs, matrix, pct), max(worst_rel, rel)
            same = sum(1 for d in ds if d.matrix == 0 and not d.metrics)
            if allowed:
                for d in ds:
                    d.note = ""  # the allowed setting differs by construction
            rows.append(f"| {how.split(':')[0]} | {stream} | {len(ds)} | {same} | {matrix:.2f} | {pct:.2f} | {rel:.1e} |")
    atol, rtol = _tolerance(results / "TOLERANCE")
    if worst_abs > atol or worst_rel > rtol:
        raise DocsTableError(f"{_shown(results / 'TOLERANCE')}: atol={atol:g}, rtol={rtol:g} do not cover the measured "
                             f"moves (largest {worst_abs:.2f} pp, relative {worst_rel:.2g}); raise them")
    return "\n".join(rows) + (f"\n\nCommitted tolerance (`results/quick/TOLERANCE`): atol = {atol:g} pp, rtol = {rtol:g}; "
                              f"the largest moves above are {worst_abs:.2f} pp and {worst_rel:.2g}.")


def _tolerance(path: Path) -> tuple[float, float]:
    """(atol, rtol) as the workflow reads them: through scripts/leaderboard_ci.sh, the one parser of the file."""
    import subprocess

    done = subprocess.run(["bash", str(ROOT / "scripts" / "leaderboard_ci.sh"), "tolerance", str(path.parent)],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise DocsTableError(done.stderr.strip() or f"{_shown(path)}: unreadable")
    atol, rtol = done.stdout.split()
    return float(atol), float(rtol)


def table_smol_cells(results: Path, regs: Any) -> str:
    """The committed `smol` profile's cells (results/smol beside results/quick), as ``cl-quick-cells``."""
    return table_cells(results.parent / "smol", regs)


GENERATORS: dict[str, Callable[[Path, Any], str]] = {
    "cl-quick-cells": table_cells,
    "smol-cells": table_smol_cells,
    "acr-tau": table_acr_tau,
    "quick-excerpt": quick_excerpt,
    "quick-size": quick_size,
    "reproducibility": reproducibility,
}
DOCUMENTS = (DOC, ROOT / "README.md", ROOT / "docs" / "text-streams-and-models.md")  # what `python scripts/docs_tables.py` regenerates


def generate(text: str, results: Path) -> str:
    """``text`` with every generated section it holds regenerated (a section's name picks its generator)."""
    from clbench.registry import build_registry

    regs = build_registry()
    names = section_names(text)
    unknown = sorted(set(names) - set(GENERATORS))
    if unknown:
        raise DocsTableError(f"no generator for section(s) {', '.join(unknown)}")
    return replace_sections(text, {name: GENERATORS[name](results, regs) for name in names})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--doc", type=Path, action="append", default=None,
                    help=f"a document (default: {', '.join(_shown(d) for d in DOCUMENTS)}); repeatable")
    ap.add_argument("--results", type=Path, default=RESULTS, help=f"the result tree (default {_shown(RESULTS)})")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when the document differs")
    args = ap.parse_args(argv)
    return max(_one(doc, args.results, args.check) for doc in args.doc or DOCUMENTS)


def _one(doc: Path, results: Path, check: bool) -> int:
    try:
        old = doc.read_text(encoding="utf-8")
        new = generate(old, results)
    except (DocsTableError, OSError) as exc:
        print(f"docs_tables: {exc}", file=sys.stderr)
        return 2
    if new == old:
        print(f"docs_tables: {_shown(doc)} is up to date", file=sys.stderr)
        return 0
    if check:
        sys.stderr.writelines(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                   f"{_shown(doc)} (committed)", f"{_shown(doc)} (generated)"))
        print(f"docs_tables: {_shown(doc)} is stale; run `python scripts/docs_tables.py`", file=sys.stderr)
        return 1
    doc.write_text(new, encoding="utf-8")
    print(f"docs_tables: wrote {_shown(doc)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
