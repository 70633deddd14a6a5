"""scripts/docs_tables.py: the tables of docs/lora-family.md that come from committed results are generated,
and the committed document is what the committed results give."""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
from pathlib import Path

import pytest
import torch

from clbench.footprints import LowRank

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "docs_tables.py"


def _module():
    spec = importlib.util.spec_from_file_location("docs_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and annotations resolve through sys.modules
    spec.loader.exec_module(module)
    return module


dt = _module()


def _doc(*sections: tuple[str, str]) -> str:
    body = "".join(f"{dt.BEGIN.format(name=n)}\n{b}{dt.END.format(name=n)}\n\nprose {n}\n\n" for n, b in sections)
    return f"# title\n\nintro\n\n{body}tail\n"


# --------------------------------------------------------------------------- markers
def test_replace_sections_replaces_only_the_bodies():
    text = _doc(("a", "old a\n| 1 |\n"), ("b", ""))
    new = dt.replace_sections(text, {"a": "| new |\n|---|\n", "b": "\n\nB\n"})
    assert new == _doc(("a", "| new |\n|---|\n"), ("b", "B\n"))
    assert dt.replace_sections(new, {"a": "| new |\n|---|", "b": "B"}) == new  # idempotent, newlines normalised
    assert dt.replace_sections(text, {"a": "", "b": ""}) == _doc(("a", ""), ("b", ""))
    assert dt.section_names(text) == ["a", "b"]


def test_replace_sections_keeps_everything_outside_the_markers():
    text = "no newline at the end"
    assert dt.replace_sections(text, {}) == text
    text = _doc(("t", "x\n")) + "<!-- an ordinary comment -->\n<!-- quick-table -->\n"
    assert dt.replace_sections(text, {"t": "y"}).endswith("tail\n<!-- an ordinary comment -->\n<!-- quick-table -->\n")


@pytest.mark.parametrize(("text", "sections", "message"), [
    (_doc(("a", "x\n")), {}, "no generator for section 'a'"),
    (_doc(("a", "x\n")), {"a": "", "b": ""}, "no markers for section(s) b"),
    ("<!-- generated: a (scripts/docs_tables.py) -->\nx\n", {"a": ""}, "no end marker"),
    ("x\n<!-- end generated: a -->\n", {"a": ""}, "without its start"),
    (_doc(("a", "x\n"), ("a", "y\n")), {"a": ""}, "appears twice"),
    ("<!-- generated: a (scripts/docs_tables.py) -->\n<!-- generated: b (scripts/docs_tables.py) -->\n"
     "<!-- end generated: b -->\n<!-- end generated: a -->\n", {"a": "", "b": ""}, "inside section 'a'"),
    ("<!-- generated: a -->\nx\n<!-- end generated: a -->\n", {"a": ""}, "malformed marker"),
])
def test_replace_sections_rejects(text, sections, message):
    with pytest.raises(dt.DocsTableError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dt.replace_sections(text, sections)


# --------------------------------------------------------------------------- the tables, on made-up cells
def _cell(root: Path, regs, method: str, seed: int, footprints: list, acr_override: float | None = None):
    from clbench import footprints as fps
    from clbench._core.boundary import compute_metrics
    from clbench._core.results import write_result
    from clbench.cell import FOOTPRINT_FILE, CellResult
    from clbench.metrics import MetricInput

    tasks = ["t1", "t2", "t3"]
    matrix = [[90.0, 10.0, 20.0], [80.0, 85.0, 30.0], [70.0, 75.0, 88.0]]
    metrics, errors = compute_metrics(regs.metrics.values(), MetricInput(matrix=matrix, footprints=footprints,
                                                                         tasks=tasks, tolerance=1e-3))
    if acr_override is not None:
        metrics["ACR"] = acr_override
    folder = root / "cl-quick" / method / "order-1" / f"seed-{seed}"
    folder.mkdir(parents=True)
    digest = fps.save(footprints, folder / FOOTPRINT_FILE)
    config = {"metrics": {"tolerance": 1e-3, "samples": 0}, "methods": {p: {} for p in method.split("+")}}
    if "nlora" in method:
        config["methods"]["nlora"] = {"penalty": "code", "lambda": 0.4}
    write_result(CellResult(method=method, stream="cl-quick", order="1", seed=seed, tasks=tasks,
                            accuracy_matrix=matrix, metrics=metrics, metric_errors=errors, config=config,
                            env={}, timings={}, footprints=digest, config_hash="0" * 64), folder)
    return metrics


def _lowrank(seed: int, tasks: int = 3, sparse: float = 0.0) -> list:
    from clbench.footprints import LowRank

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(tasks):
        task = {}
        for layer in ("q", "v"):
            A, B = torch.randn(2, 24, generator=g), torch.randn(16, 2, generator=g)
            if sparse:
                A = A * (torch.rand(A.shape, generator=g) > sparse)
                B = B * (torch.rand(B.shape, generator=g) > sparse)
            task[layer] = LowRank(A, B, 4.0)
        out.append(task)
    return out


@pytest.fixture(scope="module")
def regs():
    from clbench._exec.local import harness_registry

    return harness_registry()


def test_tables_from_cells(tmp_path, regs):
    recorded = {m: _cell(tmp_path, regs, m, 0, _lowrank(i, sparse=0.6 if m == "nlora" else 0.0))
                for i, m in enumerate(("seqlora", "olora", "nlora"))}
    _cell(tmp_path, regs, "olora", 1, _lowrank(7))  # seed 1: not in the tables
    text = dt.generate(_doc(("cl-quick-cells", "stale\n"), ("acr-tau", "")), tmp_path)

    cells = text.split(dt.BEGIN.format(name="cl-quick-cells"))[1].split(dt.END.format(name="cl-quick-cells"))[0]
    rows = [r for r in cells.splitlines() if r.startswith("| `")]
    assert [r.split(" | ")[0] for r in rows] == ["| `nlora`, code form (λ=0.4)", "| `olora`", "| `seqlora`"]
    assert f"| {recorded['olora']['AA']:.2f} | {recorded['olora']['F.Ra']:.2f} |" in rows[1]

    tau = text.split(dt.BEGIN.format(name="acr-tau"))[1].split(dt.END.format(name="acr-tau"))[0]
    assert "| method | ACR τ=1e-4 | τ=1e-3 (recorded) | τ=1e-2 | τ=0.1 | τ=0.3 |" in tau
    values = {}
    for line in tau.splitlines():
        if line.startswith("| `"):
            name, *cols = [c.strip() for c in line.strip("|").split("|")]
            values[name.strip("`")] = [float(c) for c in cols]
    assert sorted(values) == ["nlora", "olora", "seqlora"]
    for method, row in values.items():
        assert row[1] == pytest.approx(recorded[method]["ACR"], abs=5e-5)  # τ=1e-3: the recorded value
        assert row == sorted(row, reverse=True)  # a higher threshold: fewer non-zero positions
    assert "| ACR(`olora`) ÷ ACR(`nlora`) |" in tau and "| ACR(`seqlora`) ÷ ACR(`nlora`) |" in tau
    low, high = min(recorded[m]["ACR"] for m in recorded), max(recorded[m]["ACR"] for m in recorded)
    assert f"ACR lies between {low:.4f} and {high:.4f} for these 3 methods" in tau
    assert "The issue's claim, ACR(`nlora`) at least 10× below" in tau
    assert "stale" not in text
    assert dt.generate(text, tmp_path) == text


def test_recorded_acr_must_recompute(tmp_path, regs):
    _cell(tmp_path, regs, "nlora", 0, _lowrank(0), acr_override=0.5)
    with pytest.raises(dt.DocsTableError, match="recomputes to .* result.json has 0.5"):
        dt.table_acr_tau(tmp_path, regs)


def test_missing_footprints(tmp_path, regs):
    _cell(tmp_path, regs, "nlora", 0, _lowrank(0))
    (tmp_path / "cl-quick" / "nlora" / "order-1" / "seed-0" / "footprints.safetensors").unlink()
    with pytest.raises(dt.MissingFootprints, match="footprints.safetensors: missing"):
        dt.table_acr_tau(tmp_path, regs)


def test_check_reports_a_stale_document(tmp_path, regs):
    _cell(tmp_path, regs, "nlora", 0, _lowrank(0))
    doc = tmp_path / "doc.md"
    doc.write_text(_doc(("cl-quick-cells", "| typed | 1 |\n"), ("acr-tau", "")), encoding="utf-8")
    args = ["--doc", str(doc), "--results", str(tmp_path)]
    assert dt.main([*args, "--check"]) == 1
    assert "| typed | 1 |" in doc.read_text(encoding="utf-8")  # --check writes nothing
    assert dt.main(args) == 0
    assert dt.main([*args, "--check"]) == 0
    assert dt.main(["--doc", str(doc), "--results", str(tmp_path / "nowhere"), "--check"]) == 2


# --------------------------------------------------------------------------- the committed document
# That the committed documents are what the committed results give is `python scripts/docs_tables.py --check`,
# which .ci/run and the leaderboard workflow run (minutes on a 2-core machine: not repeated here).


def test_committed_docs_have_the_markers():
    text = (ROOT / "docs" / "lora-family.md").read_text(encoding="utf-8")
    assert dt.section_names(text) == ["cl-quick-cells", "acr-tau", "claims-verdict", "claims-oo", "claims-cost"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert dt.section_names(readme) == ["quick-size", "quick-excerpt", "bench-summary", "reproducibility"]
    streams = (ROOT / "docs" / "text-streams-and-models.md").read_text(encoding="utf-8")
    assert dt.section_names(streams) == ["smol-cells"]
    tuning = (ROOT / "docs" / "tuning.md").read_text(encoding="utf-8")
    assert dt.section_names(tuning) == ["tuning-choices", "tuning-fragility", "tuning-cost"]
    scale = (ROOT / "docs" / "scale-out.md").read_text(encoding="utf-8")
    assert dt.section_names(scale) == ["gpu-lease", "gpu-step-cost", "gpu-table2", "method-state"]
    bench = (ROOT / "docs" / "bench.md").read_text(encoding="utf-8")
    assert dt.section_names(bench) == ["bench-size", "bench-memory", "bench-summary", "bench-reproducibility",
                                       "bench-tuning-choices", "bench-tuning-cost", "bench-fragility",
                                       "track-tuning",
                                       "bench-equal-compute-tuning-choices", "bench-equal-compute-tuning-cost",
                                       "bench-equal-steps-tuning-choices", "bench-equal-steps-tuning-cost",
                                       "bench-memory-500-tuning-choices", "bench-memory-500-tuning-cost",
                                       "bench-memory-200-tuning-choices", "bench-memory-200-tuning-cost"]
    used = (dt.section_names(text) + dt.section_names(readme) + dt.section_names(streams) + dt.section_names(tuning)
            + dt.section_names(scale) + dt.section_names(bench))
    assert sorted(dt.GENERATORS) == sorted(set(used))  # none unused


def test_the_gpu_lease_table_sets_each_cells_measured_peak_beside_its_plan():
    """Each row's measured / plan is the largest per-task peak of the committed result over plan.json's estimate."""
    import json

    lease = ROOT / "results" / "gpu-lease"
    plan = json.loads((lease / "plan.json").read_text(encoding="utf-8"))["cells"]
    text = dt.gpu_lease(lease, None)
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    assert len(rows) == len(plan) == 5
    for key, entry in plan.items():
        tasks = json.loads((lease / key / "result.json").read_text(encoding="utf-8"))["timings"]["tasks"]
        peak = max(t["peak_memory_bytes"] for t in tasks)
        assert any(f"| {peak / 2**30:.2f} GiB | {entry['peak_bytes'] / 2**30:.2f} GiB | "
                   f"{peak / entry['peak_bytes']:.2f} |" in row for row in rows), key


def test_quick_size_counts_the_committed_cells():
    quick = ROOT / "results" / "quick"
    cells = [p.parent.relative_to(quick).parts for p in quick.rglob("result.json")]  # stream/method/order/seed
    text = dt.quick_size(quick, None)
    assert text.startswith(f"The quick default is {len(cells)} cells (")
    digits = {m for s, m, *_ in cells if s == "split-digits"}
    assert f"{len(digits)} methods × 1 order × 3 seeds on `split-digits`" in text


# --------------------------------------------------------------------------- cl-claims helpers
def test_untrained_oo_matches_sampled_peft_init():
    # PEFT's lora_A is a Linear(in → r) with torch's default init (Kaiming-uniform, a=√5); average OO over draws
    torch.manual_seed(0)
    r, n, layers, tasks, draws = 4, 48, 3, 3, 400
    total = 0.0
    for _ in range(draws):
        A = [[torch.nn.Linear(n, r, bias=False).weight.double() for _ in range(layers)] for _ in range(tasks)]
        total += sum(float(((A[i][k] @ A[-1][k].T) ** 2).sum()) for i in range(tasks - 1) for k in range(layers))
    expected = dt.untrained_oo([(r, n)] * layers, tasks)
    assert expected == pytest.approx(2 * 3 * 16 / (9 * 48))
    assert total / draws == pytest.approx(expected, rel=0.05)


def test_claim_rows_use_the_one_rule_holm_across_the_table(monkeypatch):
    from clbench import verdicts as V

    monkeypatch.setattr(dt, "_cell_footprints", lambda r: [])  # the footprint forms: n/a here
    monkeypatch.setattr(dt, "_acr", lambda r, tau, form: None)

    class R:  # the fields _claim_rows reads of a cell
        def __init__(self, seed, aa):
            self.order, self.seed, self.metrics = "1", seed, {"AA": aa, "F.Ra": 1.0}

    cells = {(folder, m): [R(s, base + s) for s in range(3)] for folder in dt.CLAIMS_FOLDERS
             for m, base in (("nlora", 60.0), ("olora", 50.0), ("olora+nlora", 40.0), ("seqlora", 30.0))}
    rows = [r for r in dt._claim_rows(cells, {f: 1e-3 for f in dt.CALIBRATED}, 1.0) if r[3] == "recorded"
            and r[0] == "AA ↑"]
    # nlora leads olora by 10 in each of 3 paired seeds: p = 2/8 = 0.25 before Holm, so never `holds`
    assert [r[-1] for r in rows] == ["not separated (1)", "not separated (1)"]
    assert V.smallest_p(3) == 0.25


def test_calibrate_finds_the_tau_of_the_target_acr(monkeypatch):
    # a fake ACR falling in τ: 1 − log10(τ)/−9 … the bisection must land where the mean over "cells" is 0.5
    monkeypatch.setattr(dt, "_acr", lambda r, tau, form: min(1.0, max(0.0, -math.log10(tau) / 9 + r)))
    tau = dt.calibrate([0.0, 0.1], "layer", target=0.5)
    assert (-math.log10(tau) / 9 + 0.05) == pytest.approx(0.5, abs=1e-6)
    with pytest.raises(dt.DocsTableError, match="does not reach"):
        dt.calibrate([5.0], "layer", target=0.5)


def test_orth_ratio_is_one_for_an_adapter_left_at_init():
    torch.manual_seed(1)
    n, r, draws = 96, 4, 300
    trained = torch.randn(r, n)  # any earlier A
    ratios = []
    for _ in range(draws):
        new = torch.nn.Linear(n, r, bias=False).weight.detach()  # PEFT's init of lora_A
        ratios += dt.orth_ratios([{"q": LowRank(trained, torch.zeros(8, r))}, {"q": LowRank(new, torch.zeros(8, r))}])
    assert sum(ratios) / draws == pytest.approx(1.0, abs=0.02)
    orthogonal = torch.zeros(r, n)
    orthogonal[:, -r:] = torch.eye(r)
    first = torch.zeros(r, n)
    first[:, :r] = torch.eye(r)
    assert dt.orth_ratios([{"q": LowRank(first, torch.zeros(8, r))}, {"q": LowRank(orthogonal, torch.zeros(8, r))}]) == [0.0]


@pytest.mark.slow
def test_method_state_rows_are_the_memory_plan_scaled_to_a_billion_parameters():
    """EWC's row, computed another way: it keeps its Fisher and the anchor of every weight outside the heads (λF is
    formed when read) and Method keeps a footprint baseline of the weight matrices, 4 bytes each, per parameter of
    the model (a CPU cell: the host is its device)."""
    from clbench._exec.local import harness_registry

    regs = harness_registry()
    table = dt.method_state(ROOT / "results", regs)
    row = next(line for line in table.splitlines() if line.startswith("| ewc "))
    from clbench._core.plan import RunRequest, make_plan
    from clbench._exec.session import build_model, build_stream

    [cell] = make_plan(regs, RunRequest(methods="ewc", streams=["split-digits"], orders=["1"], seeds=[0],
                                        out=ROOT / "unused")).cells
    model = build_model(regs, cell, build_stream(regs, cell))
    n = sum(p.numel() for p in model.parameters())
    penalised = sum(p.numel() for name, p in model.named_parameters() if name not in model.head_parameter_names())
    matrices = sum(p.numel() for name, p in model.named_parameters()
                   if p.dim() >= 2 and name not in model.output_parameter_names())
    expected = (2 * penalised + matrices) * 4 / n * 1e9 / 2**30
    assert row.split("|")[2].strip() == f"{expected:.1f}"


def test_the_equal_memory_table_is_the_result_files_means():
    """docs/bench.md's equal-memory row of GEM on split-mnist-cil, recomputed from the result files: its own memory
    (256 a task × 5 tasks, from each result's settings) and AA at its own budget and at each train.memory."""
    import json

    bench = (ROOT / "docs" / "bench.md").read_text(encoding="utf-8")
    [row] = [line for line in bench.splitlines() if line.startswith("| split-mnist-cil | `gem` |")]
    cells = [c.strip() for c in row.strip("|").split("|")]

    def mean_aa(tree: str) -> float:  # every tree's 20 cells: seeds 0-9 × orders 1, 2
        files = sorted((ROOT / "results" / tree / "split-mnist-cil" / "gem").glob("order-*/seed-*/result.json"))
        assert len(files) == 20
        return statistics.fmean(json.loads(f.read_text(encoding="utf-8"))["metrics"]["AA"] for f in files)

    first = json.loads(next((ROOT / "results/bench/split-mnist-cil/gem").glob("order-1/seed-0/result.json"))
                       .read_text(encoding="utf-8"))
    kept = first["config"]["methods"]["gem"]["memory_per_task"] * len(first["tasks"])
    assert cells[2] == f"{kept:,}: {mean_aa('bench'):.2f}" and kept == 1280
    for cell, m in zip(cells[3:], dt.MEMORY_TRACKS, strict=True):
        assert cell.startswith(f"{mean_aa(f'bench-memory/{m}'):.2f} (")


@pytest.mark.slow
def test_the_fragility_table_is_each_neighbours_mean_over_the_reported_cells_minus_the_choices():
    """One row recomputed from the committed cells by hand: group split-digits' EWC cells by their sweep point, average
    AA over the reported seeds and orders, subtract the choice's (the point the presets hold)."""
    from clbench._core.results import iter_results
    from clbench._exec.local import harness_registry

    regs = harness_registry()
    table = dt.tuning_fragility(ROOT / "results", regs)
    by_point: dict[tuple, list[float]] = {}
    for r in iter_results(ROOT / "results" / "fragility" / "quick" / "split-digits"):
        if r.method.split("@", 1)[0] == "ewc":
            by_point.setdefault(tuple(sorted(r.config["sweep"].items())), []).append(float(r.metrics["AA"]))
    preset = regs.methods.get("ewc").presets["quick/split-digits"]
    choice = tuple(sorted({"train.lr": preset["train.lr"], "ewc.lambda": preset["lambda"]}.items()))
    centre = statistics.fmean(by_point.pop(choice))
    assert len(by_point) == 4 and all(len(v) == 3 for v in by_point.values())  # four neighbours, three seeds
    moves = sorted(statistics.fmean(v) - centre for v in by_point.values())
    [row] = [line for line in table.splitlines() if line.startswith("| split-digits | ewc |")]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert float(cells[2]) == pytest.approx(centre, abs=0.005)
    assert sorted(float(c) for c in cells[3:7]) == pytest.approx(moves, abs=0.005)
    assert cells[7].endswith(f"({moves[0]:+.2f})")
