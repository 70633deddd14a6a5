"""glue-sparse: the loader on a few fabricated rows in each task's real GLUE TSV format; official metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from clbench_plugins.glue.model import REGRESSION_LABELS
from clbench_plugins.glue.scoring import official
from clbench_plugins.glue.streams import GlueConfig, GlueSparse
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from clbench.errors import ConfigError, DataError

# Real GLUE layouts: CoLA has no header (source, label, original label, sentence); the others do.
ROWS = {
    "CoLA": ["gj04\t1\t\tOur friends won't buy this analysis.", "gj04\t0\t*\tThey drank the pub.",
             "gj04\t1\t\tThe more we study verbs, the crazier they get.", "gj04\t0\t*\tDay by day the facts."],
    "SST-2": ["sentence\tlabel", "hide new secretions \t0", "contains no wit \t0", "a gorgeous film \t1",
              "warm and funny \t1"],
    "MRPC": ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t702876\t702977\tAmrozi accused him .\tHe accused Amrozi .",
             "0\t2108705\t2108831\tYucaipa owned Dominick 's .\tYucaipa bought it in 1995 .",
             "1\t1330381\t1330521\tThey had published .\tOn June 10 they published .",
             "0\t3344667\t3344648\tThe stock rose .\tThe stock fell sharply ."],
    "STS-B": ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
              "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is taking off.\t5.000",
              "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man is playing a flute.\tA man plays a bamboo flute.\t3.800",
              "2\tmain-captions\tMSRvid\t2012test\t0005\tnone\tnone\tA man spreads cheese.\tA woman slices a tomato.\t0.400",
              "3\tmain-captions\tMSRvid\t2012test\t0006\tnone\tnone\tThree men play chess.\tTwo men play chess.\t2.600"],
    "RTE": ["index\tsentence1\tsentence2\tlabel", "0\tNo weapons were found.\tWeapons were found.\tnot_entailment",
            "1\tA place of sorrow.\tPope is in sorrow.\tnot_entailment",
            "2\tHerceptin was approved.\tHerceptin is a drug.\tentailment", "3\tIt rained.\tIt was wet.\tentailment"],
    "QNLI": ["index\tquestion\tsentence\tlabel", "0\tWhen did it open?\tIt opened in 1990.\tentailment",
             "1\tWho built it?\tThe weather was fine.\tnot_entailment",
             "2\tWhat colour?\tThe door is red.\tentailment", "3\tWhere is it?\tNobody knows why.\tnot_entailment"],
}


@pytest.fixture
def glue_dir(tmp_path: Path) -> Path:
    for folder, rows in ROWS.items():
        (tmp_path / folder).mkdir()
        for split in ("train", "dev"):
            (tmp_path / folder / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return tmp_path


def test_loads_every_task_in_the_real_format(glue_dir):
    stream = GlueSparse(GlueConfig(data_dir=str(glue_dir), val_fraction=0.0))
    assert stream.order("1") == ["cola", "rte", "mrpc", "stsb", "sst2", "qnli"]
    cola = stream.data("cola")
    assert cola.train.x[1] == "They drank the pub." and cola.train.y.tolist() == [1, 0, 1, 0]
    mrpc = stream.data("mrpc")
    assert mrpc.test.x[0] == "Amrozi accused him . </s></s> He accused Amrozi ." and mrpc.test.y.tolist() == [1, 0, 1, 0]
    stsb = stream.data("stsb")
    assert stsb.test.y.tolist() == pytest.approx([5.0, 3.8, 0.4, 2.6])  # regression: the scores themselves
    assert stream.gold_scores["stsb"].tolist() == pytest.approx([5.0, 3.8, 0.4, 2.6])
    assert stream.task("stsb").labels == REGRESSION_LABELS
    assert stream.data("rte").test.y.tolist() == [1, 1, 0, 0]
    assert stream.data("qnli").train.x[0] == "When did it open? </s></s> It opened in 1990."
    assert stream.multi_head
    classes = GlueSparse(GlueConfig(data_dir=str(glue_dir), val_fraction=0.0, stsb="classes"))
    assert classes.data("stsb").test.y.tolist() == [5, 4, 0, 3]  # rounded scores as 6 classes
    assert classes.task("stsb").num_classes == 6


def test_bad_files_name_file_and_record(glue_dir):
    (glue_dir / "RTE" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n")
    stream = GlueSparse(GlueConfig(data_dir=str(glue_dir)))
    with pytest.raises(DataError, match=r"RTE/dev.tsv, line 2: label 'maybe'"):
        stream.data("rte")
    (glue_dir / "QNLI" / "train.tsv").unlink()
    with pytest.raises(DataError, match="QNLI/train.tsv is missing"):
        stream.data("qnli")
    with pytest.raises(ConfigError, match="data_dir"):
        GlueSparse(GlueConfig())
    with pytest.raises(ConfigError, match="unknown GLUE task"):
        GlueConfig(data_dir="x", tasks=("mnli2",))
    with pytest.raises(ConfigError, match="stream.stsb='ordinal'"):
        GlueConfig(data_dir="x", stsb="ordinal")


def test_official_metrics_match_sklearn_and_scipy():
    g = torch.Generator().manual_seed(0)
    pred = torch.randint(0, 2, (200,), generator=g)
    gold = torch.where(torch.rand(200, generator=g) < 0.7, pred, 1 - pred)
    assert official("matthews", pred, gold.float()) == pytest.approx(matthews_corrcoef(gold, pred))
    assert official("f1", pred, gold.float()) == pytest.approx(f1_score(gold, pred))
    assert official("accuracy", pred, gold.float()) == pytest.approx(accuracy_score(gold, pred))
    scores = torch.rand(200, generator=g) * 5
    classes = scores.round().long()  # many ties: Spearman's average ranks matter
    expected = (pearsonr(classes, scores).statistic + spearmanr(classes, scores).statistic) / 2
    assert official("pearson_spearman", classes, scores) == pytest.approx(expected)
    assert official("pearson_spearman", classes, scores) != pytest.approx(pearsonr(classes, scores).statistic)
    assert official("matthews", torch.ones(10, dtype=torch.long), gold[:10]) == 0.0  # constant prediction


def test_stream_score_is_the_official_metric_times_100(glue_dir):
    """What the runner records: Stream.evaluate → GlueSparse.score, on each task's dev rows (STS-B as
    classes: the predicted class is scored against the raw gold score)."""
    stream = GlueSparse(GlueConfig(data_dir=str(glue_dir), val_fraction=0.0, stsb="classes"))
    stsb = [5.0, 3.8, 0.4, 2.6]  # the fabricated STS-B dev scores
    pred = torch.tensor([4, 4, 1, 3])
    gold = stream.data("stsb").test.y
    assert gold.tolist() == [5, 4, 0, 3]
    expected = 50 * (pearsonr(pred, stsb).statistic + spearmanr(pred, stsb).statistic)
    assert stream.score("stsb", pred, gold) == pytest.approx(expected)
    assert stream.score("stsb", pred[:3], gold[:3]) == pytest.approx(
        50 * (pearsonr(pred[:3], stsb[:3]).statistic + spearmanr(pred[:3], stsb[:3]).statistic))
    cola = stream.data("cola").test.y  # [1, 0, 1, 0]
    p = torch.tensor([1, 1, 1, 0])
    assert stream.score("cola", p, cola) == pytest.approx(100 * matthews_corrcoef(cola, p))
    mrpc = stream.data("mrpc").test.y
    assert stream.score("mrpc", p, mrpc) == pytest.approx(100 * f1_score(mrpc, p))
    rte = stream.data("rte").test.y
    assert stream.score("rte", p, rte) == pytest.approx(100 * accuracy_score(rte, p))


def test_runner_path_scores_through_stream_evaluate(glue_dir):
    """Stream.evaluate (the runner's call) reaches the official metric, not plain accuracy."""

    class Fixed(torch.nn.Module):
        def predict(self, x, task):
            return torch.tensor([1] * len(x))

    stream = GlueSparse(GlueConfig(data_dir=str(glue_dir), val_fraction=0.0))
    cola = stream.data("cola").test.y
    got = stream.evaluate(Fixed(), "cola", batch_size=3, limit=None, device=torch.device("cpu"))
    assert got == 0.0  # constant prediction: Matthews 0, although accuracy would be 50
    got = stream.evaluate(Fixed(), "mrpc", batch_size=3, limit=None, device=torch.device("cpu"))
    mrpc = stream.data("mrpc").test.y
    assert got == pytest.approx(100 * f1_score(mrpc, torch.ones(4, dtype=torch.long)))
    assert len(cola) == 4
