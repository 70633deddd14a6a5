"""Building CL_Benchmark tasks from hub datasets (``stream.source=hub``), with a stand-in for the hub."""

from __future__ import annotations

import collections
import json
import string
from pathlib import Path

import pytest
from clbench_plugins._shared import cl_hub as hub
from clbench_plugins._shared.cl_data import GROUPS, CLBenchmarkConfig, parse_split, read_labels
from clbench_plugins.cl_benchmark.streams import standard_stream
from datasets import Dataset

from clbench.errors import DataError

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "cl_benchmark" / "CL_Benchmark"


def fake_split(task: str, n: int, unlabeled: int = 0) -> Dataset:
    """``n`` records with the columns the task's template names, class ids cycling 0..C-1, then ``unlabeled``
    records with label -1 (as GLUE test sets and some MNLI rows have)."""
    source = hub.SOURCES[task]
    fields = [f for _, f, _, _ in string.Formatter().parse(source.template) if f]
    rows = {f: [f"{f} {i}" for i in range(n + unlabeled)] for f in fields}
    rows[source.label_column] = [i % len(source.words) for i in range(n)] + [-1] * unlabeled
    return Dataset.from_dict(rows)


class FakeHub:
    """``load_dataset`` for a few tasks; records which (path, name, split) were asked for."""

    def __init__(self, sizes: dict[str, tuple[int, int]], unlabeled: int = 0) -> None:
        self.sizes = sizes
        self.unlabeled = unlabeled
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, path: str, name: str | None = None, *, split: str) -> Dataset:
        self.calls.append((path, name or "", split))
        task = next(t for t, s in hub.SOURCES.items() if (s.path, s.name) == (path, name) and t in self.sizes)
        train, test = self.sizes[task]
        return fake_split(task, train if split == "train" else test, self.unlabeled)


def test_a_built_task_has_the_papers_sizes_labels_and_templates(tmp_path):
    load = FakeHub({"MNLI": (5000, 9000)}, unlabeled=7)
    entry = hub.build_task("MNLI", tmp_path / "NLI" / "MNLI", seed=0, load=load)
    folder = tmp_path / "NLI" / "MNLI"
    labels = read_labels(folder / "labels.json")
    assert labels == ("neutral", "entailment", "contradiction")  # the stored file's order: it sets the options
    train, test = parse_split(folder / "train.json", labels), parse_split(folder / "test.json", labels)
    assert (len(train), len(test)) == (3000, 7600) == (entry["train"], entry["test"])  # 1000 × classes; 7600 cap
    assert ("nyu-mll/glue", "mnli", "validation_matched") in load.calls
    records = json.loads((folder / "train.json").read_text())
    # hub class id 0 is entailment; the fake cycles ids by record index, so premise i ↔ id i % 3
    for rec in records[:50]:
        i = int(rec["sentence"].split("\n")[0].split()[-1])
        assert rec["label"] == ("entailment", "neutral", "contradiction")[i % 3]
        assert rec["sentence"] == f"sentence 1: premise {i}\nsentence 2: hypothesis {i}"
    assert all(int(r["sentence"].split()[-1]) < 5000 for r in records)  # unlabeled rows (-1) never drawn
    per_class = collections.Counter(r["label"] for r in records)
    assert sum(per_class.values()) == 3000 and min(per_class.values()) > 900  # uniform, not forced to 1000 each


def test_small_splits_are_taken_whole_and_builds_are_deterministic(tmp_path, monkeypatch):
    load = FakeHub({"CB": (250, 56), "COPA": (400, 100)})
    for t in ("CB", "COPA"):
        hub.build_task(t, tmp_path / "a" / t, seed=0, load=load)
        hub.build_task(t, tmp_path / "b" / t, seed=0, load=load)
        for split, n in (("train", {"CB": 250, "COPA": 400}[t]), ("test", {"CB": 56, "COPA": 100}[t])):
            a, b = (tmp_path / d / t / f"{split}.json" for d in ("a", "b"))
            assert a.read_bytes() == b.read_bytes()
            assert len(json.loads(a.read_text())) == n
    monkeypatch.setattr(hub, "TRAIN_PER_CLASS", 100)  # 300 of 500: the seed decides which
    other = FakeHub({"MNLI": (500, 90)})
    hub.build_task("MNLI", tmp_path / "s0", seed=0, load=other)
    hub.build_task("MNLI", tmp_path / "s1", seed=1, load=other)
    assert (tmp_path / "s0" / "train.json").read_bytes() != (tmp_path / "s1" / "train.json").read_bytes()


def test_standard_stream_from_the_hub_builds_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CLBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(hub, "TRAIN_PER_CLASS", 10)  # the paper's 1000 and 7600, scaled by 1/100
    monkeypatch.setattr(hub, "TEST_MAX", 76)
    load = FakeHub({"dbpedia": (145, 80), "amazon": (60, 50), "yahoo": (110, 90), "agnews": (44, 76)})
    monkeypatch.setattr("datasets.load_dataset", load)
    monkeypatch.setattr("clbench.hub._reached", (True, ""))  # the faked hub answers
    stream = standard_stream(CLBenchmarkConfig(source="hub"))
    root = tmp_path / "cl_benchmark_hub" / "seed-0"
    for task in ("dbpedia", "amazon", "yahoo", "agnews"):
        assert (root / GROUPS[task] / task / "test.json").is_file()
    data = stream.load(next(t for t in stream.tasks if t.name == "agnews"))
    assert (len(data.train), len(data.test)) == (40, 76)
    provenance = json.loads((root / "PROVENANCE.json").read_text())
    assert provenance["amazon"]["test"] == 50 and "stand-in" in provenance["amazon"]["note"]
    assert provenance["dbpedia"]["source"] == "fancyzhx/dbpedia_14" and "note" not in provenance["dbpedia"]
    calls = len(load.calls)
    standard_stream(CLBenchmarkConfig(source="hub"))
    assert len(load.calls) == calls  # already built: nothing fetched again
    with pytest.raises(DataError, match=r"built from the hub with seed 0, not 1"):
        standard_stream(CLBenchmarkConfig(source="hub", data_dir=str(root), seed=1))
    standard_stream(CLBenchmarkConfig(source="hub", seed=1))  # the default cache keeps one folder per seed
    assert (tmp_path / "cl_benchmark_hub" / "seed-1" / "PROVENANCE.json").is_file()


def test_hub_failures_name_the_task_and_the_source(tmp_path):
    def offline(*args, **kw):
        raise ConnectionError("no network")

    with pytest.raises(DataError, match=r"cannot build task 'agnews' from hub dataset fancyzhx/ag_news: ConnectionError"):
        hub.ensure_tasks(tmp_path, ["agnews"], GROUPS, load=offline)

    def renamed(*args, split: str, **kw):
        return Dataset.from_dict({"body": ["x"], "label": [0]})

    with pytest.raises(DataError, match=r"fancyzhx/ag_news \(agnews, train\) has no field 'text'"):
        hub.build_task("agnews", tmp_path / "x", load=renamed)

    def relabelled(*args, split: str, **kw):
        return Dataset.from_dict({"text": ["x"], "label": [9]})

    with pytest.raises(DataError, match="label 9 is not a class id 0..3"):
        hub.build_task("agnews", tmp_path / "y", load=relabelled)


def test_source_setting_is_checked():
    with pytest.raises(Exception, match="stream.source='web'"):
        CLBenchmarkConfig(source="web")


@pytest.mark.skipif(not REAL.is_dir(), reason="needs ../shared/data/cl_benchmark (tests and CI only)")
def test_labels_and_templates_match_the_stored_cl_benchmark_files():
    assert set(hub.SOURCES) == set(GROUPS)
    for task, source in hub.SOURCES.items():
        folder = REAL / GROUPS[task] / task
        assert list(source.order or source.words) == json.loads((folder / "labels.json").read_text()), task
        stored = [f for f in ("train.json", "test.json") if (folder / f).is_file()]
        if task in hub.NOTES or not stored:
            continue  # stand-ins and unchecked templates are named in NOTES
        literals = [lit for lit, _, _, _ in string.Formatter().parse(source.template) if lit]
        for rec in json.loads((folder / stored[0]).read_text())[:200]:
            assert rec["sentence"].startswith(source.template.split("{", 1)[0]), task
            assert all(lit in rec["sentence"] for lit in literals), (task, literals, rec["sentence"][:200])
