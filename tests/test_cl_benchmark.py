"""CL-benchmark streams: ``standard``/``long`` on the real CL_Benchmark files (where present), missing files,
record validation, the shipped ``cl-quick`` subset, and the paper's prompt / exact-match normalisation."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from clbench_plugins._shared.cl_data import GROUPS, CLBenchmarkConfig, CLBenchmarkStream
from clbench_plugins._shared.hf.prompts import format_prompt, match_label, normalize_answer
from clbench_plugins.cl_benchmark.streams import (
    LONG_ORDERS,
    STANDARD_ORDERS,
    QuickConfig,
    long_stream,
    quick_root,
    quick_stream,
    standard_stream,
)

from clbench.data import TaskInfo
from clbench.errors import ConfigError, DataError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "cl_benchmark"
REAL = SHARED / "CL_Benchmark"
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"offline CL benchmark copy not found at {REAL}")


def raw(task: str, split: str) -> list[dict[str, str]]:
    return json.loads((REAL / GROUPS[task] / task / f"{split}.json").read_text(encoding="utf-8"))


def raw_labels(task: str) -> list[str]:
    return json.loads((REAL / GROUPS[task] / task / "labels.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------ real files
@needs_real
def test_standard_and_long_orders_are_the_papers() -> None:
    # N-LoRA appendix Table 7, written out again here (not imported) so a typo in the module fails.
    assert STANDARD_ORDERS["1"] == ["dbpedia", "amazon", "yahoo", "agnews"]
    assert STANDARD_ORDERS["3"] == ["yahoo", "amazon", "agnews", "dbpedia"]
    assert LONG_ORDERS["4"][:4] == ["MNLI", "CB", "WiC", "COPA"] and LONG_ORDERS["6"][-3:] == ["MultiRC", "BoolQA",
                                                                                                "WiC"]
    for order in LONG_ORDERS.values():
        assert len(order) == len(set(order)) == 15
    # every task of every order has its folder (at least labels.json) in the repositories' layout
    for task in {t for o in (*STANDARD_ORDERS.values(), *LONG_ORDERS.values()) for t in o}:
        assert (REAL / GROUPS[task] / task / "labels.json").is_file(), task


@needs_real
def test_standard_on_the_real_copy_names_the_missing_yahoo_files() -> None:
    with pytest.raises(DataError) as err:
        standard_stream(CLBenchmarkConfig(data_dir=str(SHARED)))  # the parent of CL_Benchmark is accepted
    msg = str(err.value)
    assert str(REAL / "TC" / "yahoo" / "train.json") in msg and str(REAL / "TC" / "yahoo" / "test.json") in msg
    assert "dbpedia/train.json" in msg  # absent too, and reported in the same message
    assert "amazon" not in msg and "agnews" not in msg  # present files are not listed
    # deriving a missing split does not help a task with neither split
    with pytest.raises(DataError, match="yahoo/train.json") as err:
        standard_stream(CLBenchmarkConfig(data_dir=str(REAL), derive_missing=True))
    assert "dbpedia" not in str(err.value)


@needs_real
def test_long_on_the_real_copy_lists_every_missing_split(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLBENCH_DATA_DIR", str(REAL))
    with pytest.raises(DataError) as err:
        long_stream(CLBenchmarkConfig())
    msg = str(err.value)
    for path in ("TC/yahoo/train.json", "TC/dbpedia/train.json", "SC/yelp/test.json", "SC/IMDB/test.json",
                 "MultiRC/MultiRC/test.json"):
        assert str(REAL / path) in msg, path
    assert "derive_missing" in msg  # the hint for the splits that could be derived


@needs_real
def test_present_tasks_load_every_record_with_labels_from_labels_json() -> None:
    tasks = ["agnews", "CB", "COPA", "RTE"]
    stream = CLBenchmarkStream("real", REAL, tasks, {"x": tasks})
    for task in tasks:
        data = stream.data(task)
        labels = raw_labels(task)
        assert list(data.info.labels) == labels
        assert data.info.group == GROUPS[task]
        for split, part in (("train", data.train), ("test", data.test)):
            records = raw(task, split)
            assert len(part) == len(records)
            assert part.x == [r["sentence"] for r in records]
            assert part.y.tolist() == [labels.index(r["label"]) for r in records]
    assert len(stream.data("agnews").train) == 4000 and len(stream.data("CB").test) == 56  # data/README counts


@needs_real
def test_subsampling_is_stratified_and_fixed_by_the_stream_seed() -> None:
    a = CLBenchmarkStream("real", REAL, ["agnews"], {"x": ["agnews"]}, train_per_task=200, test_per_task=80, seed=3)
    b = CLBenchmarkStream("real", REAL, ["agnews"], {"x": ["agnews"]}, train_per_task=200, test_per_task=80, seed=3)
    c = CLBenchmarkStream("real", REAL, ["agnews"], {"x": ["agnews"]}, train_per_task=200, test_per_task=80, seed=4)
    da, db, dc = a.data("agnews"), b.data("agnews"), c.data("agnews")
    assert da.train.x == db.train.x and da.train.x != dc.train.x
    assert len(da.train) == 200 and len(da.test) == 80
    labels = raw_labels("agnews")
    per_class = Counter(labels.index(r["label"]) for r in raw("agnews", "train"))  # 968/1040/1000/992
    assert Counter(da.train.y.tolist()) == {c: round(n * 200 / 4000) for c, n in per_class.items()}  # proportional
    full = {r["sentence"] for r in raw("agnews", "train")}
    assert set(da.train.x) <= full


@needs_real
def test_derived_dbpedia_train_is_a_disjoint_part_of_its_test_set() -> None:
    stream = CLBenchmarkStream("real", REAL, ["dbpedia"], {"x": ["dbpedia"]}, derive_missing=True,
                               derive_fraction=0.25)
    assert "dbpedia/train" in stream.provenance
    data = stream.data("dbpedia")
    test_records = raw("dbpedia", "test")
    assert len(data.train) + len(data.test) == len(test_records) == 7600
    assert abs(len(data.train) - 0.25 * 7600) <= 14  # 14 classes, rounded per class
    assert not set(data.train.x) & set(data.test.x)
    assert set(data.train.x) | set(data.test.x) == {r["sentence"] for r in test_records}


# ------------------------------------------------------------------------------------ fabricated files
def write_task(root: Path, task: str, labels: list[str], splits: dict[str, object]) -> Path:
    folder = root / GROUPS[task] / task
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "labels.json").write_text(json.dumps(labels))
    for split, content in splits.items():
        text = content if isinstance(content, str) else json.dumps(content)
        (folder / f"{split}.json").write_text(text)
    return folder


GOOD = [{"sentence": "a fine film", "label": "positive"}, {"sentence": "dull", "label": "negative"}]


def test_missing_split_file_is_named_with_the_derive_hint(tmp_path: Path) -> None:
    folder = write_task(tmp_path, "SST-2", ["negative", "positive"], {"train": GOOD})
    with pytest.raises(DataError) as err:
        CLBenchmarkStream("fab", tmp_path, ["SST-2"], {"x": ["SST-2"]})
    assert str(folder / "test.json") in str(err.value) and "derive_missing" in str(err.value)
    assert "train.json" not in str(err.value)


def test_missing_labels_json_and_missing_folder_are_named(tmp_path: Path) -> None:
    folder = write_task(tmp_path, "SST-2", ["negative", "positive"], {"train": GOOD, "test": GOOD})
    (folder / "labels.json").unlink()
    with pytest.raises(DataError, match="SST-2/labels.json"):
        CLBenchmarkStream("fab", tmp_path, ["SST-2"], {"x": ["SST-2"]})
    with pytest.raises(ConfigError, match="no such folder"):
        standard_stream(CLBenchmarkConfig(data_dir=str(tmp_path / "nowhere")))


def test_no_data_dir_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLBENCH_DATA_DIR", raising=False)
    with pytest.raises(ConfigError, match="CLBENCH_DATA_DIR"):
        long_stream(CLBenchmarkConfig())


@pytest.mark.parametrize(("records", "expected"), [
    ([*GOOD, {"sentence": "meh", "label": "neutral"}], r"record 2 has label 'neutral', not in labels.json"),
    ([*GOOD, {"label": "positive"}], r"record 2 has no 'sentence'"),
    ([{"sentence": "x", "label": 1}], r"record 0 has no 'label' string"),
    ([GOOD[0], ["not", "an", "object"]], r"record 1 is not an object"),
    ('[{"sentence": "x", "label": "positive"},', r"not valid JSON"),
    ({"sentence": "x", "label": "positive"}, r"expected a JSON list"),
])
def test_bad_records_name_the_file_and_the_record(tmp_path: Path, records: object, expected: str) -> None:
    folder = write_task(tmp_path, "SST-2", ["negative", "positive"], {"train": GOOD, "test": records})
    stream = CLBenchmarkStream("fab", tmp_path, ["SST-2"], {"x": ["SST-2"]})  # files exist: built fine
    with pytest.raises(DataError, match=expected) as err:
        stream.data("SST-2")
    assert str(err.value).startswith(str(folder / "test.json"))


def test_bad_labels_json_is_named(tmp_path: Path) -> None:
    folder = write_task(tmp_path, "SST-2", ["positive", "positive"], {"train": GOOD, "test": GOOD})
    with pytest.raises(DataError, match="distinct label strings") as err:
        CLBenchmarkStream("fab", tmp_path, ["SST-2"], {"x": ["SST-2"]})
    assert str(folder / "labels.json") in str(err.value)


# ------------------------------------------------------------------------------------ shipped cl-quick
def test_cl_quick_ships_four_valid_tasks_with_yelp_for_yahoo() -> None:
    stream = quick_stream(QuickConfig())
    assert stream.order("1") == ["dbpedia", "amazon", "yelp", "agnews"]
    assert stream.order("3") == ["yelp", "amazon", "agnews", "dbpedia"]
    assert "yelp stands in for yahoo" in stream.provenance
    for task in stream.order("1"):
        data = stream.data(task)  # every record validated against labels.json
        lines = (quick_root() / GROUPS[task] / task / "train.jsonl").read_text().splitlines()
        assert len(data.train) == len([line for line in lines if line.strip()])
        assert 200 <= len(data.train) <= 500 and 100 <= len(data.test) <= 300  # "a few hundred a task"
        assert not set(data.train.x) & set(data.test.x), f"{task}: train and test overlap"
        assert set(data.train.y.tolist()) == set(range(data.info.num_classes)), f"{task}: a class is missing"


@needs_real
def test_cl_quick_records_come_from_the_real_files() -> None:
    stream = quick_stream(QuickConfig())
    for task in ("amazon", "agnews", "yelp", "dbpedia"):
        source = {(r["sentence"], r["label"]) for split in ("train", "test")
                  if (REAL / GROUPS[task] / task / f"{split}.json").is_file() for r in raw(task, split)}
        data = stream.data(task)
        for part in (data.train, data.test):
            pairs = {(x, data.info.labels[int(y)]) for x, y in zip(part.x, part.y, strict=True)}
            assert pairs <= source, task


def test_jsonl_bad_line_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "SC" / "SST-2"
    folder.mkdir(parents=True)
    (folder / "labels.json").write_text('["negative", "positive"]')
    (folder / "train.jsonl").write_text('{"sentence": "ok", "label": "positive"}\n{oops\n')
    (folder / "test.jsonl").write_text('{"sentence": "ok", "label": "positive"}\n')
    stream = CLBenchmarkStream("fab", tmp_path, ["SST-2"], {"x": ["SST-2"]}, ext="jsonl")
    with pytest.raises(DataError, match=r"train.jsonl: line 2 is not JSON"):
        stream.data("SST-2")


# ------------------------------------------------------------------------------------ prompt and EM
def test_prompt_is_the_papers_string() -> None:
    sc = TaskInfo("amazon", ("very negative", "negative", "neutral", "positive", "very positive"), "SC",
                  "What is the sentiment of the following paragraph? Choose one from the option.\n")
    expected = ("Task:SC\nDataset:amazon\nWhat is the sentiment of the following paragraph? Choose one from the "
                "option.\nOption: very negative, negative, neutral, positive, very positive \nGreat kettle.\n"
                "Answer:")
    assert format_prompt(sc, "Great kettle.") == expected
    assert format_prompt(sc, "x", options=False, header=False) == (
        "What is the sentiment of the following paragraph? Choose one from the option.\nx\nAnswer:")
    copa = TaskInfo("COPA", ("A", "B"), "COPA", "")
    assert format_prompt(copa, "Q? A: x B: y") == "Task:COPA\nDataset:COPA\nQ? A: x B: y\nAnswer:"


def test_exact_match_normalisation() -> None:
    labels = ("World", "Sports", "Business", "Science or Technology")
    assert normalize_answer("  Science  or\tTechnology. ") == "science or technology"
    assert match_label("science or technology!", labels) == 3
    assert match_label("Sports", labels) == 1
    assert match_label("Sport", labels) == -1  # no partial credit
    assert match_label("Sports Business", labels) == -1


@needs_real
def test_make_quick_reproduces_the_shipped_subset_byte_for_byte(tmp_path: Path) -> None:
    from clbench_plugins.cl_benchmark.make_quick import TASKS, cut_task

    for task in TASKS:
        cut_task(REAL, tmp_path, task, seed=0)
        for name in ("labels.json", "train.jsonl", "test.jsonl"):
            shipped = quick_root() / GROUPS[task] / task / name
            assert (tmp_path / GROUPS[task] / task / name).read_bytes() == shipped.read_bytes(), f"{task}/{name}"
