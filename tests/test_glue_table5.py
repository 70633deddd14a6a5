"""Table 5's protocol: per-task masked fine-tuning from the base, the regression head (STS-B), GLUE
metrics on hand-computed values, and the paper-expander preset."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from clbench_plugins.glue.model import REGRESSION_LABELS, GlueEncoder, GlueEncoderConfig
from clbench_plugins.glue.scoring import official
from clbench_plugins.glue.streams import GlueConfig, GlueSparse
from clbench_plugins.pertask.config import PerTaskMaskConfig, PerTaskRandomConfig
from clbench_plugins.pertask.masked import PerTaskMasked
from scipy.stats import pearsonr, spearmanr
from test_packnet_method import make_cell, run_task  # tests/ is on sys.path (rootdir conftest)

from clbench import testing
from clbench._core.plan import RunRequest, make_plan
from clbench.config import TrainConfig
from clbench.data import TaskInfo
from clbench.method import CellContext
from clbench.model import StreamInfo


# --------------------------------------------------------------------------- metrics, by hand
def test_metrics_on_hand_computed_values():
    pred, gold = torch.tensor([1, 1, 0, 0]), torch.tensor([1.0, 0.0, 0.0, 0.0])
    # tp 1, fp 1, tn 2, fn 0
    assert official("matthews", pred, gold) == pytest.approx((1 * 2 - 1 * 0) / math.sqrt(2 * 1 * 3 * 2))
    assert official("f1", pred, gold) == pytest.approx(2 * 1 / (2 * 1 + 1 + 0))
    assert official("accuracy", pred, gold) == pytest.approx(0.75)
    # x − x̄ = (−1, 0, 1), y − ȳ = (−4/3, −1/3, 5/3): r = 3 / (√2 · √42/3); the ranks agree: ρ = 1
    got = official("pearson_spearman", torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 4.0]))
    assert got == pytest.approx(0.5 * (9 / math.sqrt(84) + 1.0))
    assert official("pearson_spearman", torch.ones(4), torch.tensor([0.0, 1.0, 2.0, 3.0])) == 0.0  # undefined → 0
    with pytest.raises(ValueError, match="unknown GLUE metric"):
        official("bleu", pred, gold)


# --------------------------------------------------------------------------- per-task masked method
def _cell(config: PerTaskMaskConfig, tasks: int = 3) -> tuple[PerTaskMasked, torch.nn.Module, CellContext]:
    return make_cell(PerTaskMasked, config, tasks=tasks,
                     train=TrainConfig(epochs=1, batch_size=16, lr=0.01, optimizer="rmsprop"))


_run_task = run_task


@pytest.mark.parametrize("config", [PerTaskMaskConfig(density=0.25), PerTaskRandomConfig(density=0.25)], ids=str)
def test_every_task_restarts_from_the_base_weights(config):
    assert config.mask_spec().overlap_policy == "independent"  # no task steers another's mask
    method, model, ctx = _cell(config)
    base = {n: p.detach().clone() for n, p in method.masked_parameters().items()}
    _run_task(method, model, ctx, 0)
    after0 = {n: p.detach().clone() for n, p in method.masked_parameters().items()}
    mask0 = {n: m.clone() for n, m in method.masks.items()}
    _run_task(method, model, ctx, 1)
    for n, p in method.masked_parameters().items():
        mask1 = method.masks[n]
        assert not torch.equal(mask1, mask0[n])  # a fresh mask per task
        assert torch.equal(p.detach()[~mask1], base[n][~mask1]), n  # task 0's update is gone
        assert (p.detach()[mask1] != base[n][mask1]).any(), n  # task 1 moved its own coordinates
    assert method.loss_terms(None, None) == {}  # type: ignore[arg-type]  # no EWC
    after1 = {n: p.detach().clone() for n, p in method.masked_parameters().items()}
    with method.evaluating("t0"):  # task 0 is scored with exactly its own weights
        for n, p in method.masked_parameters().items():
            assert torch.equal(p.detach(), after0[n]), n
    with method.evaluating("t2"):  # not trained yet: the base model
        for n, p in method.masked_parameters().items():
            assert torch.equal(p.detach(), base[n]), n
    for n, p in method.masked_parameters().items():  # and back to the current task's weights
        assert torch.equal(p.detach(), after1[n]), n


def test_random_variant_draws_uniform_masks_and_the_expander_checks_its_spectrum():
    method, model, ctx = _cell(PerTaskRandomConfig(density=0.25), tasks=2)
    _run_task(method, model, ctx, 0)
    exp, model2, ctx2 = _cell(PerTaskMaskConfig(density=0.25), tasks=2)
    _run_task(exp, model2, ctx2, 0)
    name = "backbone.3.weight"  # 32 × 32, density 1/4: a biregular expander has every degree 8
    rows = exp.masks[name].sum(dim=1)
    assert rows.min() == rows.max() == 8 and exp.stats[0]["layers"][name]["sigma2"] is not None
    assert method.masks[name].sum() == exp.masks[name].sum() == 256  # equally sparse


def test_runner_scores_each_task_with_its_own_weights(tmp_path):
    """Through the runner: the last row equals the diagonal (a task is never overwritten by a later one)."""
    regs = testing.registry()
    [result] = testing.run(regs, tmp_path, "pertask-expander", sets={"pertask-expander.density": [0.25]})
    a = result.accuracy_matrix
    assert [a[-1][j] for j in range(len(a))] == [a[j][j] for j in range(len(a))]


# --------------------------------------------------------------------------- STS-B as regression
def _tiny_encoder(tasks: tuple[TaskInfo, ...]) -> GlueEncoder:
    from clbench_plugins._shared.hf.model import minilm_path
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    backbone = BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=64))
    tok = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
    info = StreamInfo("glue-sparse", tasks, "text", (), True)
    return GlueEncoder(GlueEncoderConfig(lora_modules=("query", "value")), info, backbone, tok)


def test_regression_head_trains_on_scores_and_predicts_floats():
    stsb, rte = TaskInfo("stsb", REGRESSION_LABELS), TaskInfo("rte", ("entailment", "not_entailment"))
    model = _tiny_encoder((stsb, rte))
    assert model.heads["stsb"].out_features == 1 and model.heads["rte"].out_features == 2
    x = ["a plane takes off", "a man plays a flute", "a man slices cheese", "two men play chess"] * 2
    y = torch.tensor([5.0, 3.8, 0.4, 2.6] * 2)
    logits, loss = model.training_loss(x, "stsb", y)
    assert logits is not None
    assert float(loss.detach()) == pytest.approx(float(((logits[:, 0] - y) ** 2).mean().detach()))  # MSE
    model.eval()
    pred = model.predict(x, "stsb")
    with torch.no_grad():
        assert pred.dtype.is_floating_point and torch.equal(pred, model(x, "stsb")[:, 0])
    assert model.predict(x, "rte").dtype == torch.long  # classification tasks: argmax
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    first = float(loss.detach())
    for _ in range(60):
        opt.zero_grad()
        _, loss = model.training_loss(x, "stsb", y)
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.1 * first
    assert model.prompts(["raw text"], stsb) == ["raw text"]  # GLUE-style: no prompt


def test_glue_encoder_refuses_the_similarity_head():
    from clbench.errors import ConfigError

    with pytest.raises(ConfigError, match="linear heads only"):
        GlueEncoder(GlueEncoderConfig(head="similarity"), None, None, None)  # type: ignore[arg-type]


STSB = ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
        *[f"{i}\tmain\tMSRvid\t2012\t{i}\tnone\tnone\tA man {i}.\tA woman {i}.\t{s}"
          for i, s in enumerate([5.0, 3.8, 0.4, 2.6, 1.2, 4.4])]]


def test_stsb_regression_stream_and_score(tmp_path: Path):
    (tmp_path / "STS-B").mkdir()
    for split in ("train", "dev"):
        (tmp_path / "STS-B" / f"{split}.tsv").write_text("\n".join(STSB) + "\n", encoding="utf-8")
    stream = GlueSparse(GlueConfig(data_dir=str(tmp_path), tasks=("stsb",), val_fraction=0.0))
    data = stream.data("stsb")
    assert stream.task("stsb").labels == REGRESSION_LABELS
    assert data.train.y.tolist() == pytest.approx([5.0, 3.8, 0.4, 2.6, 1.2, 4.4])
    pred = torch.tensor([4.1, 3.9, 1.0, 2.0, 2.2, 4.0])
    gold = [5.0, 3.8, 0.4, 2.6, 1.2, 4.4]
    expected = 50 * (pearsonr(pred, gold).statistic + spearmanr(pred, gold).statistic)
    assert stream.score("stsb", pred, data.test.y) == pytest.approx(expected)
    classes = GlueSparse(GlueConfig(data_dir=str(tmp_path), tasks=("stsb",), val_fraction=0.0, stsb="classes"))
    assert classes.data("stsb").train.y.tolist() == [5, 4, 0, 3, 1, 4] and classes.task("stsb").num_classes == 6


# --------------------------------------------------------------------------- presets
def _plan(stream: str, data_dir: str, methods: str | None = "all"):
    regs = testing.registry()
    return make_plan(regs, RunRequest(profile="paper-expander", methods=methods, streams=[stream],
                                      data_dir=data_dir, out=Path("unused")))


def test_table5_preset_is_the_per_task_protocol(tmp_path):
    plan = _plan("glue-sparse", str(tmp_path))
    assert sorted(c.method for c in plan.cells) == ["pertask-expander", "pertask-random"]
    for c in plan.cells:
        method = c.methods_cfg[c.method]
        assert c.model == "glue-encoder" and method.density == 0.01 and method.lambda_ == 0
        assert c.model_cfg.name_or_path == "FacebookAI/roberta-base" and c.model_cfg.head == "linear"
        assert (c.train.optimizer, c.train.lr, c.train.batch_size, c.train.epochs) == ("rmsprop", 1e-5, 32, 3)
        assert c.stream_cfg.stsb == "regression"


DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cl_benchmark"


@pytest.mark.skipif(not DATA.is_dir(), reason=f"no CL benchmark copy at {DATA}")
def test_glue_cl_preset_resolves_on_the_offline_copy():
    plan = _plan("glue-cl", str(DATA))
    assert sorted(c.method for c in plan.cells) == ["pertask-expander", "pertask-random"]
    assert {c.model for c in plan.cells} == {"glue-encoder"} and {c.order for c in plan.cells} == {"1"}
    assert all(c.methods_cfg[c.method].density == 0.01 for c in plan.cells)


# --------------------------------------------------------------------------- the write-up
ROOT = Path(__file__).resolve().parents[1]


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("glue_table5", ROOT / "scripts" / "glue_table5.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_s_verdicts_come_from_the_one_rule():
    script = _script()
    scores = {m: {t: {str(k): 50.0 + (10.0 if m == "expander" else 0.0) + k for k in script.SEEDS}
                  for t in script.ORDER} for m in ("expander", "random")}
    loss = {m: {t: {str(k): 0.5 for k in script.SEEDS} for t in script.ORDER} for m in scores}
    text = script.table({"scores": scores, "train_loss": loss})
    # +10 in each of 3 paired seeds: p = 0.25 before Holm across 7 rows, so "not separated", never "holds"
    assert text.count("| not separated |") == 7 and "holds" not in text.split("\n\n")[0]
    same = {m: {t: {str(k): 50.0 for k in script.SEEDS} for t in script.ORDER} for m in scores}
    assert script.table({"scores": same, "train_loss": loss}).count("| equivalent |") == 7  # identical in every seed


def test_glue_table5_doc_is_up_to_date():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "glue_table5.py"), "render", "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
