"""The CL benchmark of O-LoRA / N-LoRA: the ``standard`` (orders 1–3) and ``long`` (orders 4–6) streams, read
from a directory in the repositories' ``CL_Benchmark`` layout, and the offline ``cl-quick`` stream shipped in this
package. The reader (layout, checks, subsampling, derived splits, the hub) is
:mod:`clbench_plugins._shared.cl_data`, which ``glue-cl`` reads with too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clbench_plugins._shared.cl_data import CLBenchmarkConfig, CLBenchmarkStream, from_dir

from clbench.config import bounded

# Task orders: N-LoRA paper, appendix Table 7 (= O-LoRA scripts order_{1,2,3}.sh, N-LoRA scripts order_{4,5,6}.sh).
STANDARD_ORDERS: dict[str, list[str]] = {
    "1": ["dbpedia", "amazon", "yahoo", "agnews"],
    "2": ["dbpedia", "amazon", "agnews", "yahoo"],
    "3": ["yahoo", "amazon", "agnews", "dbpedia"],
}
LONG_ORDERS: dict[str, list[str]] = {
    "4": ["MNLI", "CB", "WiC", "COPA", "QQP", "BoolQA", "RTE", "IMDB", "yelp", "amazon", "SST-2", "dbpedia",
          "agnews", "MultiRC", "yahoo"],
    "5": ["MultiRC", "BoolQA", "WiC", "MNLI", "CB", "COPA", "QQP", "RTE", "IMDB", "SST-2", "dbpedia", "agnews",
          "yelp", "amazon", "yahoo"],
    "6": ["yelp", "amazon", "MNLI", "CB", "COPA", "QQP", "RTE", "IMDB", "SST-2", "dbpedia", "agnews", "yahoo",
          "MultiRC", "BoolQA", "WiC"],
}
# cl-quick: the standard orders with yahoo (absent offline) replaced by yelp (see data/README.md).
QUICK_ORDERS: dict[str, list[str]] = {
    o: ["yelp" if t == "yahoo" else t for t in tasks] for o, tasks in STANDARD_ORDERS.items()
}


@dataclass(frozen=True)
class QuickConfig:
    """Settings of ``cl-quick`` (the subset shipped in the package)."""

    train_per_task: int = bounded(0, ge=0, help="0 = all shipped (≈300 a task)")
    test_per_task: int = bounded(0, ge=0, help="0 = all shipped (≈150 a task)")
    seed: int = 0


def standard_stream(config: CLBenchmarkConfig) -> CLBenchmarkStream:
    return from_dir("standard", STANDARD_ORDERS, config)


def long_stream(config: CLBenchmarkConfig) -> CLBenchmarkStream:
    return from_dir("long", LONG_ORDERS, config)


def quick_root() -> Path:
    return Path(__file__).parent / "data" / "cl-quick"


QUICK_PROVENANCE = ("cl-quick: a fixed-seed subset of the O-LoRA/N-LoRA CL_Benchmark shipped in the package; "
                    "dbpedia train and test both cut from its test set, yelp stands in for yahoo "
                    "(see clbench_plugins/cl_benchmark/data/README.md)")


def quick_stream(config: QuickConfig) -> CLBenchmarkStream:
    tasks = ["dbpedia", "amazon", "yelp", "agnews"]
    return CLBenchmarkStream("cl-quick", quick_root(), tasks, QUICK_ORDERS, "jsonl", config.train_per_task,
                             config.test_per_task, config.seed, provenance=QUICK_PROVENANCE)
