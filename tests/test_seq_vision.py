"""The class-incremental image streams (plugins/seq_vision), ResNet-18 (plugins/resnet) and the training-time
augmentations (clbench.data.CropFlip, ResizedCropFlip), on stand-in files in the datasets' exact formats (no package
ships CIFAR, TinyImageNet or ImageNet-R; plugins/seq_vision/standin.py writes them)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from clbench_plugins.resnet.model import ResNetConfig
from clbench_plugins.resnet.model import build as build_resnet
from clbench_plugins.seq_vision import loaders, standin
from clbench_plugins.seq_vision.streams import NORMALISE, SeqVision, VisionConfig
from PIL import Image

from clbench import testing
from clbench.data import CropFlip, ResizedCropFlip
from clbench.errors import ConfigError, DataError
from clbench.model import StreamInfo

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("standin")
    standin.write_cifar(root, "cifar10", train=6, test=2)
    standin.write_cifar(root, "cifar100", train=2, test=1)
    standin.write_tinyimagenet(root, classes=200, train=2, test=1)
    return root


def _raw_batches(folder: Path, names: list[str], key: bytes) -> tuple[np.ndarray, list[int]]:
    """The batches' data and labels read by the pickle module itself (the files are ours: trusted here)."""
    records = [pickle.loads((folder / n).read_bytes(), encoding="bytes") for n in names]
    return np.concatenate([r[b"data"] for r in records]), [y for r in records for y in r[key]]


def test_cifar_batches_read_as_rgb_planes_in_file_order(data):
    x, y = loaders.cifar_from_dir(data, "cifar10", "train")
    flat, labels = _raw_batches(data / "cifar-10-batches-py", [f"data_batch_{k}" for k in range(1, 6)], b"labels")
    assert x.shape == (60, 3, 32, 32) and x.dtype == torch.uint8 and y.tolist() == labels
    # pixel (row i, column j) of channel c is byte c·1024 + 32·i + j of the image's row
    for n, c, i, j in [(0, 0, 0, 0), (7, 1, 3, 30), (59, 2, 31, 31)]:
        assert int(x[n, c, i, j]) == int(flat[n, c * 1024 + 32 * i + j])
    x100, y100 = loaders.cifar_from_dir(data / "cifar-100-python", "cifar100", "test")  # the folder itself
    assert x100.shape == (100, 3, 32, 32) and sorted(y100.tolist()) == list(range(100))


class _Boom:
    def __reduce__(self):
        return (print, ("executed",))


def test_a_batch_that_names_any_other_callable_is_refused_unrun(tmp_path, capsys):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": _Boom(), b"labels": []}, protocol=2))
    with pytest.raises(DataError, match=r"test_batch: not a CIFAR python batch \(it names \w+\.print; only numpy arrays"):
        loaders.cifar_from_dir(tmp_path, "cifar10", "test")
    assert "executed" not in capsys.readouterr().out


@pytest.mark.parametrize(("record", "match"), [
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}, r"label 10 of image 1 is outside 0..9"),
    ({b"data": np.zeros((2, 1024), np.uint8), b"labels": [0, 1]}, r"N×3072 uint8"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, r"2 images but \(1,\) labels"),
    ({b"data": np.zeros((2, 3072), np.uint8)}, r"holds b'data' and b'labels'"),
])
def test_a_malformed_batch_is_named_with_what_is_wrong(tmp_path, record, match):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "test_batch").write_bytes(pickle.dumps(record, protocol=2))
    with pytest.raises(DataError, match=match) as err:
        loaders.cifar_from_dir(tmp_path, "cifar10", "test")
    assert "test_batch" in str(err.value)


def test_a_missing_batch_or_folder_is_named(tmp_path, data):
    with pytest.raises(DataError, match="no cifar-10-batches-py/ folder"):
        loaders.cifar_from_dir(tmp_path, "cifar10", "train")
    folder = standin.write_cifar(tmp_path, "cifar10", train=1, test=1)
    (folder / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3 is missing"):
        loaders.cifar_from_dir(tmp_path, "cifar10", "train")


def test_tinyimagenet_reads_train_and_val_folders_with_sorted_wnids(data):
    from PIL import Image

    folder = data / "tiny-imagenet-200"
    wnids = sorted((folder / "wnids.txt").read_text().split())
    x, y = loaders.tiny_from_dir(data, "train")
    assert x.shape == (400, 3, 64, 64) and y.tolist() == [k for k in range(200) for _ in range(2)]
    first = np.array(Image.open(folder / "train" / wnids[1] / "images" / f"{wnids[1]}_0.JPEG").convert("RGB"))
    assert torch.equal(x[2], torch.from_numpy(first).permute(2, 0, 1))
    vx, vy = loaders.tiny_from_dir(data, "val")
    notes = [line.split("\t") for line in (folder / "val" / "val_annotations.txt").read_text().splitlines()]
    assert vy.tolist() == [wnids.index(n[1]) for n in notes] and len(vx) == 200
    (folder / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn99\t0\t0\t1\t1\n")
    try:
        with pytest.raises(DataError, match=r"line 1: .* a wnid of wnids.txt"):
            loaders.tiny_from_dir(data, "val")
    finally:
        (folder / "val" / "val_annotations.txt").write_text("".join("\t".join(n) + "\n" for n in notes))


def test_seq_cifar10_is_five_pairs_of_classes_normalised_as_mammoth(data):
    stream = SeqVision(VisionConfig(data_dir=str(data)), name="seq-cifar10", dataset="cifar10", classes=10, tasks=5)
    assert [t.classes for t in stream.tasks] == [(str(a), str(a + 1)) for a in range(0, 10, 2)]
    assert stream.scenario == "class-incremental" and all(len(t.labels) == 10 for t in stream.tasks)
    task = stream.data("4-5")
    raw, labels = loaders.cifar_from_dir(data, "cifar10", "train")
    keep = (labels == 4) | (labels == 5)
    assert task.val is None and task.train.y.tolist() == labels[keep].tolist()
    mean, sd = (torch.tensor(v).view(1, 3, 1, 1) for v in NORMALISE["cifar10"])
    assert torch.allclose(task.train.x * sd + mean, raw[keep].float() / 255, atol=1e-6)
    assert len(task.test) == 4  # two test images a class in the stand-in
    tiny = SeqVision(VisionConfig(data_dir=str(data)), name="seq-tinyimg", dataset="tinyimg", classes=4, tasks=2)
    assert tiny.input_shape == (3, 64, 64) and len(tiny.data("2-3").train) == 4
    plain = SeqVision(VisionConfig(data_dir=str(data), normalise=False), name="seq-cifar10", dataset="cifar10",
                      classes=10, tasks=5)  # the prompt papers' input: pixels in [0, 1], padded with 0
    assert torch.equal(plain.data("4-5").train.x, raw[keep].float() / 255)
    assert plain.augment is not None and plain.augment.fill == (0.0, 0.0, 0.0)


def _crop_flip_by_hand(x: torch.Tensor, tops, lefts, mirror, size: int, pad: int, fill) -> torch.Tensor:
    """Each image padded with ``fill`` alone (F.pad of each channel), cut, then flipped with torch.flip."""
    out = []
    for img, top, left, m in zip(x, tops, lefts, mirror, strict=True):
        padded = torch.stack([F.pad(ch, (pad,) * 4, value=v) for ch, v in zip(img, fill, strict=True)])
        cut = padded[:, top : top + size, left : left + size]
        out.append(cut.flip(-1) if m else cut)
    return torch.stack(out)


def test_crop_flip_equals_a_crop_and_flip_of_each_padded_image():
    x = torch.randn(16, 3, 8, 8)
    fill = (-1.0, 0.5, 2.0)
    aug = CropFlip(8, 2, True, fill)
    got = aug(x, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)  # the same draws, in the order CropFlip takes them
    tops, lefts = torch.randint(0, 5, (16,), generator=g), torch.randint(0, 5, (16,), generator=g)
    mirror = torch.rand(16, generator=g) < 0.5
    assert 0 < int(mirror.sum()) < 16 and len(set(tops.tolist())) > 1
    assert torch.equal(got, _crop_flip_by_hand(x, tops.tolist(), lefts.tolist(), mirror.tolist(), 8, 2, fill))


def test_cropping_normalised_images_padded_with_black_equals_normalising_the_crop():
    pixels = torch.rand(6, 3, 32, 32)
    mean, sd = (torch.tensor(v).view(1, 3, 1, 1) for v in NORMALISE["cifar10"])
    fill = tuple((-mean / sd).flatten().tolist())
    normalised_first = CropFlip(32, 4, True, fill)((pixels - mean) / sd, torch.Generator().manual_seed(0))
    cropped_first = (CropFlip(32, 4, True)(pixels, torch.Generator().manual_seed(0)) - mean) / sd
    assert torch.allclose(normalised_first, cropped_first, atol=1e-6)


def test_resnet18_has_mammoths_shapes_and_weight_count(data):
    """11,173,962 weights at width 64 with a 10-way head: torchvision's resnet18 (11,689,512 with its 7×7 stem and
    1000-way head) less the stem's 7×7 kernels (3·64·(49 − 9)) and 990 of its head's outputs (512·990 + 990)."""
    stream = SeqVision(VisionConfig(data_dir=str(data)), name="seq-cifar10", dataset="cifar10", classes=10, tasks=5)
    model = build_resnet(ResNetConfig(), StreamInfo.of(stream))
    assert sum(p.numel() for p in model.parameters()) == 11_689_512 - 3 * 64 * 40 - (512 * 990 + 990)
    assert model(torch.zeros(2, 3, 32, 32), "0-1").shape == (2, 10)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs[0].kernel_size == (3, 3) and convs[0].stride == (1, 1) and all(c.bias is None for c in convs)
    assert not any(isinstance(m, torch.nn.MaxPool2d) for m in model.modules())


def test_a_seq_cifar10_cell_trains_on_augmented_batches_and_stores_raw_ones(tmp_path, data):
    """End to end on the stand-in: a tiny ResNet (width 4, one block a stage), the training batches augmented (the
    method sees ``batch.raw`` as stored and ``batch.x`` cropped and flipped)."""
    from clbench import hookimpl
    from clbench.method import Method
    from clbench.specs import MethodSpec

    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    class Spy(Method):
        def loss_terms(self, batch, logits):  # noqa: ANN001, ANN201
            seen.append((batch.x.clone(), batch.raw.clone()))
            return {}

    class Plugin:
        @hookimpl
        def clbench_add_methods(self):  # noqa: ANN201
            return [MethodSpec("spy", Spy, description="records its batches")]

    regs = testing.registry(Plugin())
    sets = {"stream.data_dir": [str(data)], "model.width": [4], "model.blocks": [[1, 1]], "train.epochs": [1],
            "train.batch_size": [16]}
    [result] = testing.running.run(regs, tmp_path / "out", "spy", stream="seq-cifar10", sets=sets, model="resnet18",
                                   orders=["1"])
    assert result.status == "complete", result.error
    assert len(result.accuracy_matrix) == 5 and all(0 <= v <= 100 for v in result.accuracy_matrix[-1])
    assert seen and all(x.shape == raw.shape == (len(x), 3, 32, 32) for x, raw in seen)
    assert all(not torch.equal(x, raw) for x, raw in seen)


def test_the_shared_best_args_rows_are_the_der_papers_own_on_every_mnist_entry():
    """plugins/_shared/mammoth.row (the CIFAR profiles') gives every MNIST row what der_paper's own row gives."""
    from clbench_plugins._shared import mammoth
    from clbench_plugins.der_paper import plugin as der_paper
    from clbench_plugins.der_paper.presets import BEST_ARGS, TASKS

    checked = 0
    for dataset, models in BEST_ARGS.items():
        for model, by_buffer in models.items():
            for buffer in by_buffer if -1 not in by_buffer else (-1,):
                assert mammoth.row(BEST_ARGS[dataset], TASKS[dataset], model, buffer) == der_paper.row(
                    dataset, model, buffer), (dataset, model, buffer)
                checked += 1
    assert checked > 50


def test_paper_der_cifar_plans_each_rows_best_args_and_has_a_target_for_each_row(tmp_path):
    from clbench._core.plan import RunRequest, make_plan

    regs = testing.registry()
    cells = make_plan(regs, RunRequest(profile="paper-der-cifar-500", out=tmp_path, data_dir=str(tmp_path))).cells
    by = {(c.stream, c.method): c for c in cells}
    assert {c.seed for c in cells} == {0, 1, 2, 3, 4} and {c.order for c in cells} == {"1"}
    derpp = by[("seq-cifar10", "derpp")]
    assert (derpp.train.lr, derpp.train.batch_size, derpp.train.epochs, derpp.train.head) == (0.03, 32, 50, "full")
    d = derpp.methods_cfg["derpp"]
    assert (d.buffer_size, d.alpha, d.beta, d.replay_batch_size) == (500, 0.2, 0.5, 32)
    assert by[("seq-tinyimg", "der")].train.epochs == 100 and ("seq-tinyimg", "gem") not in by
    assert by[("seq-cifar10", "icarl")].train.weight_decay == pytest.approx(2e-5)
    assert by[("seq-cifar10-til", "replay")].train.scoring == "task" and by[("seq-cifar10", "replay")].model == "resnet18"
    targets = regs.profiles.items["paper-der-cifar-500"].targets["rows"]
    assert {(t["stream"], t["method"]) for t in targets} == {(c.stream, c.method) for c in cells}


@pytest.mark.parametrize("stream", ["seq-cifar10", "seq-tinyimg"])
def test_the_streams_meet_the_stream_contract_on_stand_ins(data, stream, tmp_path):
    result = testing.check_stream(testing.registry(), stream, tmp_path, model="mlp", config={"data_dir": str(data)})
    assert len(result.tasks) == (5 if stream == "seq-cifar10" else 10)


# every registered method, from the registry: a method a plugin adds is run on the image streams when it registers
REGISTERED = sorted(testing.registry().methods)


@pytest.mark.slow
@pytest.mark.parametrize("method", REGISTERED)
def test_every_method_that_applies_runs_a_seq_cifar10_cell_on_a_tiny_resnet(data, method, tmp_path):
    """One cell a method (order 1, one epoch, a ResNet of width 4): complete with its matrix in [0, 100], or not
    planned at all where the method cannot run on a class-incremental image stream (the plan says why)."""
    sets = {"stream.data_dir": [str(data)], "model.width": [4], "model.blocks": [[1, 1]], "train.epochs": [1],
            "train.batch_size": [16]}
    try:
        results = testing.running.run(testing.registry(), tmp_path, method, stream="seq-cifar10", sets=sets,
                                      model="resnet18", orders=["1"])
    except ConfigError as exc:  # a method that needs task identity, adapters, text: refused at plan time, named
        assert f"method {method!r} cannot run on stream 'seq-cifar10'" in str(exc)
        return
    assert results
    for r in results:
        assert r.status == "complete", r.error
        assert all(v is None or 0 <= v <= 100 for row in r.accuracy_matrix for v in row)


def test_micro_batches_keep_each_pieces_unaugmented_inputs():
    from clbench._exec.engine import micro_batches
    from clbench.data import Batch

    x, raw = torch.randn(7, 3, 4, 4), torch.randn(7, 3, 4, 4)
    pieces = micro_batches(Batch(x, torch.arange(7), "t", raw), 3)
    assert [len(p) for p in pieces] == [2, 3, 2]
    assert torch.equal(torch.cat([p.raw for p in pieces]), raw) and torch.equal(torch.cat([p.x for p in pieces]), x)


def test_channels_last_resnet_gives_the_same_logits(data):
    stream = SeqVision(VisionConfig(data_dir=str(data)), name="seq-cifar10", dataset="cifar10", classes=10, tasks=5)
    x = stream.data("0-1").test.x
    torch.manual_seed(0)
    plain = build_resnet(ResNetConfig(width=8), StreamInfo.of(stream)).eval()
    torch.manual_seed(0)
    nhwc = build_resnet(ResNetConfig(width=8, channels_last=True), StreamInfo.of(stream)).eval()
    assert nhwc.backbone.stem[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(plain(x, "0-1"), nhwc(x, "0-1"), atol=1e-5)


def test_the_shipped_imagenet_r_lists_are_codas_split():
    """24,000 training and 6,000 test images, 200 classes in both, no image in both, one label a wnid."""
    train, test = loaders.imagenet_r_split("train"), loaders.imagenet_r_split("test")
    assert (len(train), len(test)) == (24_000, 6_000)
    assert {k for _, k in train} == {k for _, k in test} == set(range(200))
    assert not {p for p, _ in train} & {p for p, _ in test}
    label_of: dict[str, int] = {}
    assert all(label_of.setdefault(p.split("/")[0], k) == k for p, k in train + test) and len(label_of) == 200


@pytest.fixture(scope="module")
def imagenet_r(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("imagenet-r")
    _, split = standin.write_imagenet_r(root, classes=200, train=1, test=1)
    return root, split


def test_imagenet_r_reads_the_listed_files_resized_as_mammoth(imagenet_r):
    root, split = imagenet_r
    lists = json.loads(split.read_text())
    x, y = loaders.imagenet_r_from_dir(root, "train", str(split))
    assert x.shape == (200, 3, 224, 224) and x.dtype == torch.uint8 and y.tolist() == [k for _, k in lists["train"]]
    first = Image.open(root / "imagenet-r" / lists["train"][3][0]).convert("RGB")
    by_hand = np.asarray(first.resize((224, 224), Image.Resampling.BICUBIC))
    assert torch.equal(x[3], torch.from_numpy(by_hand).permute(2, 0, 1))
    tx, _ = loaders.imagenet_r_from_dir(root, "test", str(split))
    test = Image.open(root / "imagenet-r" / lists["test"][5][0]).convert("RGB")
    centre = np.asarray(test.resize((256, 256), Image.Resampling.BICUBIC))[16:240, 16:240]
    assert torch.equal(tx[5], torch.from_numpy(centre).permute(2, 0, 1))
    stream = SeqVision(VisionConfig(data_dir=str(root), split_file=str(split), train_limit=3), name="imagenet-r",
                       dataset="imagenet-r", classes=200, tasks=10)
    task = stream.data(stream.tasks[1].name)
    assert stream.input_shape == (3, 224, 224) and len(task.train) == 3 and len(task.test) == 20
    assert set(task.test.y.tolist()) == set(range(20, 40)) and 0 <= float(task.train.x.min()) <= 1
    assert isinstance(stream.augment, ResizedCropFlip)


def test_imagenet_r_names_what_is_wrong(imagenet_r, tmp_path):
    root, split = imagenet_r
    lists = json.loads(split.read_text())
    lists["test"][0][0] = "n00000000/gone.jpg"
    (tmp_path / "gone.json").write_text(json.dumps(lists))
    with pytest.raises(DataError, match=r"1 of the 200 test images .* missing \(the first: n00000000/gone.jpg\)"):
        loaders.imagenet_r_from_dir(root, "test", str(tmp_path / "gone.json"))
    lists["test"][0] = [lists["test"][1][0], 200]
    (tmp_path / "label.json").write_text(json.dumps(lists))
    with pytest.raises(DataError, match="has label 200, not in 0-199"):
        loaders.imagenet_r_from_dir(root, "test", str(tmp_path / "label.json"))
    stream = SeqVision(VisionConfig(), name="imagenet-r", dataset="imagenet-r", classes=200, tasks=10)
    with pytest.raises(DataError, match="ImageNet-R is read from --data-dir"):
        stream.data(stream.tasks[0].name)


def test_resized_crop_flip_samples_a_box_of_the_drawn_area_and_ratio():
    """On ramps (a pixel's value its column, or its row) bilinear sampling is exact, so each output tells where its
    box lies: the slopes give its width and height (negative width: mirrored), which must hold an area fraction in
    [0.08, 1] and an aspect ratio in [3/4, 4/3], inside the image; about half are mirrored."""
    n, side, size = 400, 64, 16
    cols = torch.arange(side, dtype=torch.float).expand(side, side)
    x = torch.stack([cols, cols.T]).expand(n, 2, side, side)
    out = ResizedCropFlip(size)(x, torch.Generator().manual_seed(0))
    w = (out[:, 0, 0, -1] - out[:, 0, 0, 0]) / (size - 1) * size / side  # fraction of the width, signed
    h = (out[:, 1, -1, 0] - out[:, 1, 0, 0]) / (size - 1) * size / side
    area, ratio = w.abs() * h, w.abs() / h
    assert ((area > 0.08 - 1e-4) & (area < 1 + 1e-4)).all()
    assert ((ratio > 0.75 - 1e-3) & (ratio < 4 / 3 + 1e-3)).all()  # (a box that does not fit: the whole image)
    assert (out >= -0.5).all() and (out <= side - 0.5).all()
    assert 0.4 < float((w < 0).float().mean()) < 0.6
    assert float(area.std()) > 0.1  # drawn, not fixed


def test_the_memory_plan_of_a_resnet_replay_cell_is_its_measurement_on_real_tensors(data, tmp_path):
    """DER++ on stand-in Seq-CIFAR-10 with a narrow ResNet-18 (batch norm, augmentation, a buffer of logits): the
    dry run's meta-device peak against the same code on real CPU tensors, within 20 %."""
    from clbench._core.cells import RunRequest
    from clbench._core.plan import make_plan
    from clbench._exec import memory

    regs = testing.registry()
    sets = {"model.width": [4], "model.blocks": [[1, 1, 1, 1]], "stream.data_dir": [str(data)], "train.epochs": [1],
            "train.batch_size": [8], "derpp.buffer_size": [20]}
    req = RunRequest(profile="paper-der-cifar", methods="derpp", streams=["seq-cifar10"], seeds=[0], sets=sets,
                     out=tmp_path)
    cell = make_plan(regs, req).cells[0]
    meta, meta_peak, _, _ = memory._measure(regs, cell, torch.device("meta"))
    cpu, cpu_peak, _, _ = memory._measure(regs, cell, torch.device("cpu"))  # (a CPU cell counts its host buffer too)
    assert meta_peak == pytest.approx(cpu_peak, rel=0.2) and meta["weights"] == cpu["weights"] > 0
