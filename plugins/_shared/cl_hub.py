"""Build CL_Benchmark task folders from Hugging Face hub datasets (``--set stream.source=hub``).

For users who have a network but not the O-LoRA/N-LoRA ``CL_Benchmark`` folder (the exact files the papers
used: clone ``cmnfriend/O-LoRA`` and pass ``--data-dir`` to get those). Each task is built once into the
cache (``$CLBENCH_CACHE/cl_benchmark_hub/seed-N`` unless ``stream.data_dir`` names a folder), in the same layout,
so the stream reads and validates it like any CL_Benchmark folder; ``PROVENANCE.json`` there records the
sources, the seed and the counts.

Sampling follows the repositories' files: a train set of 1,000 × the number of classes (all of CB and COPA)
and a test set of at most 7,600, both **uniform** random samples, not stratified — the stored train files
hold 983–1,031 examples per class, which is what a uniform sample gives (the CL_Benchmark folder the O-LoRA
repository ships; its sizes are in docs/reference-code.md §1.7).
Sentences use the templates of the stored files ("Title: …\\nText: …", "sentence 1: …\\nsentence 2: …").

Where the hub has no exact twin, the stand-in is named in ``NOTES`` and in the provenance file: Zhang et
al.'s 5-class Amazon reviews are not on the hub as a dataset; the multilingual Amazon reviews (English) are
used; ``ag_news`` on the hub joins title and description into one text; Yahoo's stored file is not
available to us, so its template is our choice. Numbers on a hub-built stream are not the papers' numbers.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from clbench import hub
from clbench.data import atomic_write_text, confined, read_text
from clbench.errors import DataError

TRAIN_PER_CLASS = 1000
TEST_MAX = 7600


@dataclass(frozen=True)
class HubSource:
    path: str  # hub dataset id
    name: str | None  # its configuration
    test_split: str  # the split the CL_Benchmark test file comes from (GLUE/SuperGLUE: validation)
    words: tuple[str, ...]  # CL_Benchmark label word of hub class id 0, 1, ...
    template: str  # str.format over a hub record → the "sentence"
    order: tuple[str, ...] | None = None  # labels.json order when it differs from ``words`` (it sets the prompt's options)
    label_column: str = "label"
    train_all: bool = False  # CB and COPA: the whole train split

    def sentence(self, record: Mapping[str, Any]) -> str:
        return self.template.format(**{k: str(v) for k, v in record.items()})


SENTIMENT_5 = ("very negative", "negative", "neutral", "positive", "very positive")
PAIR = "sentence 1: {premise}\nsentence 2: {hypothesis}"
FALSE_TRUE = ("False", "True")
BAD_GOOD = ("Bad", "Good")
# labels.json orders below are those of the stored CL_Benchmark files
SOURCES: dict[str, HubSource] = {
    "dbpedia": HubSource("fancyzhx/dbpedia_14", None, "test",
                         ("Company", "Educational Institution", "Artist", "Athlete", "Office Holder",
                          "Mean of Transportation", "Building", "Natural Place", "Village", "Animal", "Plant",
                          "Album", "Film", "Written Work"), "Title: {title}\nText: {content}\n"),
    "amazon": HubSource("SetFit/amazon_reviews_multi_en", None, "test", SENTIMENT_5, "Text: {text}\n"),
    "yahoo": HubSource("community-datasets/yahoo_answers_topics", None, "test",
                       ("Society & Culture", "Science & Mathematics", "Health", "Education & Reference",
                        "Computers & Internet", "Sports", "Business & Finance", "Entertainment & Music",
                        "Family & Relationships", "Politics & Government"),
                       "Title: {question_title}\nText: {question_content} {best_answer}\n", label_column="topic"),
    "agnews": HubSource("fancyzhx/ag_news", None, "test", ("World", "Sports", "Business", "Science or Technology"),
                        "Text: {text}"),
    "yelp": HubSource("Yelp/yelp_review_full", None, "test", SENTIMENT_5, "Text: {text}"),
    "MNLI": HubSource("nyu-mll/glue", "mnli", "validation_matched", ("entailment", "neutral", "contradiction"), PAIR,
                      order=("neutral", "entailment", "contradiction")),
    "CB": HubSource("aps/super_glue", "cb", "validation", ("entailment", "contradiction", "neutral"), PAIR,
                    train_all=True),
    "RTE": HubSource("nyu-mll/glue", "rte", "validation", ("entailment", "contradiction"),
                     "sentence 1: {sentence1}\nsentence 2: {sentence2}", order=("contradiction", "entailment")),
    "QQP": HubSource("nyu-mll/glue", "qqp", "validation", FALSE_TRUE,
                     "first sentence: {question1}\nsecond sentence: {question2}"),
    "IMDB": HubSource("stanfordnlp/imdb", None, "test", BAD_GOOD, "{text}", order=("Good", "Bad")),
    "SST-2": HubSource("nyu-mll/glue", "sst2", "validation", BAD_GOOD, "Text: {sentence}", order=("Good", "Bad")),
    "BoolQA": HubSource("aps/super_glue", "boolq", "validation", FALSE_TRUE,
                        "question: {question}\npassage: {passage}", order=("True", "False")),
    "MultiRC": HubSource("aps/super_glue", "multirc", "validation", FALSE_TRUE,
                         "paragraph: {paragraph}\nquestion: {question}\ncandidate answer: {answer}"),
    "WiC": HubSource("aps/super_glue", "wic", "validation", FALSE_TRUE, "word: {word}\n{sentence1}\n{sentence2}",
                     order=("True", "False")),
    "COPA": HubSource("aps/super_glue", "copa", "validation", ("A", "B"),
                      'Which sentence is the {question} of "{premise}"? Choose one between A and B.\n'
                      "A: {choice1}\nB: {choice2}", train_all=True),
}
NOTES: dict[str, str] = {
    "amazon": "stand-in: the multilingual Amazon reviews (English, 5 stars), not Zhang et al. (2015)'s Amazon "
              "Review Full that CL_Benchmark samples; no title field, and its test split has 5,000 records",
    "agnews": "the hub's ag_news joins title and description into one 'text'; CL_Benchmark has them apart",
    "yahoo": "template chosen by clbench (the stored CL_Benchmark yahoo files were not available to check)",
}


def _sample(dataset: Any, source: HubSource, n: int | None, rng: random.Random) -> list[dict[str, Any]]:
    """``n`` labelled records drawn uniformly (all when ``n`` is None or too large), in dataset order.
    Works on the label column and ``select`` so a million-record split is never turned into dicts."""
    ids = dataset[source.label_column]
    valid = [i for i, y in enumerate(ids) if isinstance(y, int) and y >= 0]  # GLUE/MNLI unlabeled rows: -1
    if n is not None and n < len(valid):
        valid = sorted(rng.sample(valid, n))
    return [dict(r) for r in dataset.select(valid)]


def _records(rows: Sequence[Mapping[str, Any]], source: HubSource, task: str, split: str) -> list[dict[str, str]]:
    out = []
    for i, row in enumerate(rows):
        label = row[source.label_column]
        if not 0 <= label < len(source.words):
            raise DataError(f"hub dataset {source.path} ({task}, {split}) record {i}: label {label!r} is not a class "
                            f"id 0..{len(source.words) - 1}; has the dataset changed on the hub?")
        try:
            sentence = source.sentence(row)
        except KeyError as exc:
            raise DataError(f"hub dataset {source.path} ({task}, {split}) has no field {exc}; fields: "
                            f"{sorted(row)}") from None
        out.append({"sentence": sentence, "label": source.words[label]})
    return out


def build_task(task: str, folder: Path, seed: int = 0,
               load: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Write ``folder/{train,test}.json`` and ``labels.json`` for ``task``; returns its provenance entry."""
    source = SOURCES[task]
    if load is None:
        try:
            from datasets import load_dataset as load
        except ImportError:
            raise DataError("stream.source=hub needs the datasets package: pip install 'clbench[llm]'") from None
    args = (source.path,) if source.name is None else (source.path, source.name)
    rng = random.Random(f"{seed}/{task}")
    counts = {}
    for split, hub_split, n in (("train", "train", None if source.train_all else TRAIN_PER_CLASS * len(source.words)),
                                ("test", source.test_split, TEST_MAX)):
        records = _records(_sample(load(*args, split=hub_split), source, n, rng), source, task, split)
        atomic_write_text(folder / f"{split}.json", json.dumps(records, ensure_ascii=False, indent=0))
        counts[split] = len(records)
    atomic_write_text(folder / "labels.json", json.dumps(list(source.order or source.words), ensure_ascii=False))
    entry = {"source": source.path, "config": source.name, "test_split": source.test_split, "seed": seed, **counts}
    if task in NOTES:
        entry["note"] = NOTES[task]
    return entry


def read_provenance(path: Path) -> dict[str, Any]:
    """``PROVENANCE.json`` of a hub-built folder; an unreadable one is a :class:`DataError` naming it."""
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise DataError(f"{path}: expected a JSON object of task → provenance entry")
    return data


def ensure_tasks(root: Path, tasks: Sequence[str], groups: Mapping[str, str], seed: int = 0,
                 load: Callable[..., Any] | None = None) -> None:
    """Build every task of ``tasks`` that ``root`` lacks; record what was built in ``root/PROVENANCE.json``.
    A task built there with another seed is an error, not silently reused."""
    prov_path = confined(root, "PROVENANCE.json")
    provenance = read_provenance(prov_path) if prov_path.is_file() else {}
    other = sorted(t for t in tasks if t in provenance and provenance[t].get("seed") != seed)
    if other:
        raise DataError(f"{root}: tasks {other} were built from the hub with seed "
                        f"{provenance[other[0]].get('seed')}, not {seed}; use another stream.data_dir")
    missing = [t for t in tasks if not all((root / groups[t] / t / f).is_file()
                                           for f in ("train.json", "test.json", "labels.json"))]
    if not missing:
        return
    if load is None:  # the hub for real: refuse at once, quietly, where it cannot be reached and nothing is cached
        for task in missing:
            hub.require(SOURCES[task].path, f"the CL benchmark's task {task!r} comes from hub dataset",
                        "set stream.data_dir=PATH (or --data-dir) to a CL_Benchmark copy", repo_type="dataset")
    for task in tqdm(missing, desc="building CL_Benchmark tasks from the hub", unit="task"):
        try:
            provenance[task] = build_task(task, root / groups[task] / task, seed, load)
        except DataError:
            raise  # already names the task and the source
        except Exception as exc:  # network, auth, a moved dataset: any of datasets' many error types
            raise DataError(f"cannot build task {task!r} from hub dataset {SOURCES[task].path}: "
                            f"{type(exc).__name__}: {exc}") from exc
        atomic_write_text(prov_path, json.dumps(provenance, indent=1, sort_keys=True))
