"""A stream in another form (``StreamFormSpec``, hook ``clbench_add_stream_forms``): a task-incremental stream's tasks
as one class-incremental problem. Checked against a class-incremental stream written by hand (split-digits-cil is
split-digits' tasks under one head over the ten digits), and on stand-in CIFAR files for split-cifar10-100-cil,
whose tasks share label names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from clbench import hookimpl, testing
from clbench._core.plan import RunRequest, make_plan
from clbench._core.provenance import code_record
from clbench._exec.session import build_stream
from clbench.errors import DataError, PluginError
from clbench.specs import StreamFormSpec
from clbench.testing.running import _request


class Forms:
    """A plugin declaring forms (``name`` → ``(base, form)``)."""

    def __init__(self, **forms: tuple[str, str]) -> None:
        self.forms = forms

    @hookimpl
    def clbench_add_stream_forms(self) -> list[StreamFormSpec]:
        return [StreamFormSpec(name.replace("_", "-"), base, form) for name, (base, form) in self.forms.items()]


def _stream(regs, name: str, profile: str = "quick", **sets):
    [cell] = make_plan(regs, _request(Path("/tmp/unused"), "seqft", name, profile=profile,
                                      sets={f"stream.{k}": [v] for k, v in sets.items()}, orders=["1"])).cells
    return cell, build_stream(regs, cell)


def test_the_class_incremental_form_of_split_digits_is_split_digits_cil():
    """Its labels are the ten digits in the order of the base's tasks (no two tasks share a name, so each keeps its
    own), each task's classes its two digits, and every split's images and labels those of the stream written by
    hand: a local label 0/1 of task (2k, 2k+1) moved to 2k/2k+1 is the digit itself."""
    regs = testing.registry(Forms(digits_form=("split-digits", "class-incremental")))
    _, form = _stream(regs, "digits-form")
    _, cil = _stream(regs, "split-digits-cil")
    assert form.scenario == cil.scenario == "class-incremental" and not form.multi_head
    assert [(t.name, t.labels, t.classes) for t in form.tasks] == [(t.name, t.labels, t.classes) for t in cil.tasks]
    assert form.orders == cil.orders and form.input_shape == cil.input_shape
    for task in form.order("1"):
        a, b = form.data(task), cil.data(task)
        for split in ("train", "test", "val"):
            assert torch.equal(getattr(a, split).x, getattr(b, split).x)
            assert torch.equal(getattr(a, split).y, getattr(b, split).y)


def test_a_forms_cells_are_identified_by_the_base_streams_code(tmp_path):
    """The transform is the core's: a form's cell records the digest of the plugin whose code makes its data, and the
    listing names the plugin that declared it."""
    regs = testing.registry(Forms(digits_form=("split-digits", "class-incremental")))
    cell, _ = _stream(regs, "digits-form")
    base, _ = _stream(regs, "split-digits")
    code, _ = code_record(regs, cell)
    assert code["stream:digits-form"] == code_record(regs, base)[0]["stream:split-digits"]
    assert regs.streams.origins["digits-form"].plugin.endswith("Forms")
    # the base's presets (its quick model and settings), but none of the quick profile's default streams
    assert regs.streams.get("digits-form").presets == regs.streams.get("split-digits").presets  # (no head set there)
    default = make_plan(regs, RunRequest(profile="quick", methods="seqft", out=tmp_path)).cells
    assert "split-digits" in {c.stream for c in default} and "digits-form" not in {c.stream for c in default}


def test_a_cell_on_a_form_trains_one_head_whose_unseen_classes_are_masked(tmp_path):
    """The masked head (train.head=masked, the default): after the first task the model predicts among its two digits
    only, so every later task scores 0 until it is trained."""
    regs = testing.registry(Forms(digits_form=("split-digits", "class-incremental")))
    [result] = testing.run(regs, tmp_path, "seqft", "digits-form", profile="quick", orders=["1"],
                           sets={"train.epochs": [1]})
    assert result.status == "complete", result.error
    matrix = result.accuracy_matrix
    assert all(matrix[0][j] == 0.0 for j in range(1, len(matrix[0]))) and matrix[0][0] > 50


def _cifar_standin(root: Path) -> Path:
    """Numpy-layout CIFAR-10 and CIFAR-100 (2 images a class) in the folders split-cifar10-100 reads."""
    rng = np.random.default_rng(0)
    for which, classes in (("cifar10", 10), ("cifar100", 100)):
        for split in ("train", "test"):
            folder = root / which / split
            folder.mkdir(parents=True)
            y = np.repeat(np.arange(classes), 2)
            np.save(folder / "X.npy", rng.integers(0, 256, (len(y), 32, 32, 3), dtype=np.uint8))
            np.save(folder / "y.npy", y)
    return root


def test_split_cifar10_100_cil_names_its_60_classes_by_task_and_moves_each_label_to_its_place(tmp_path):
    regs = testing.registry()
    data = str(_cifar_standin(tmp_path / "cifar"))
    _, base = _stream(regs, "split-cifar10-100", "paper-lps", data_dir=data)
    _, form = _stream(regs, "split-cifar10-100-cil", "paper-lps", data_dir=data)  # (the base's model and settings)
    labels = form.tasks[0].labels
    assert len(labels) == 60 and labels[:2] == ("cifar10/0", "cifar10/1") and labels[10] == "cifar100-0/0"
    assert labels[-1] == "cifar100-4/49"
    for k, task in enumerate(base.order("1")):
        a, b = form.data(task), base.data(task)
        assert form.task(task).classes == labels[10 * k : 10 * k + 10]
        assert torch.equal(a.test.x, b.test.x) and torch.equal(a.test.y, b.test.y + 10 * k)
    assert form.scenario == "class-incremental" and form.augment is base.augment
    # the base's presets (paper-lps's model) and the methods' for it, without the base's one head a task
    preset = regs.streams.get("split-cifar10-100-cil").presets["paper-lps"]
    assert preset["model"] == "cifarnet" and "model.multi_head" not in preset
    lps = regs.methods.get("lps").presets
    assert lps["paper-lps/split-cifar10-100-cil"] == lps["paper-lps/split-cifar10-100"]


def test_forms_that_cannot_be_made_are_refused_naming_the_plugin():
    with pytest.raises(PluginError, match=r"form of stream 'split-digitz'.*did you mean 'split-digits'"):
        testing.registry(Forms(x=("split-digitz", "class-incremental")))
    with pytest.raises(PluginError, match=r"in form 'domain-incremental'; forms: \['class-incremental'\]"):
        testing.registry(Forms(x=("split-digits", "domain-incremental")))
    with pytest.raises(PluginError, match="declares stream .split-mnist., which plugin .vision_streams., clbench"):
        testing.registry(Forms(split_mnist=("split-digits", "class-incremental")))
    regs = testing.registry(Forms(perm_form=("permuted-digits", "class-incremental")))
    with pytest.raises(DataError, match="needs a task-incremental stream whose tasks have label sets of their own"):
        _stream(regs, "perm-form")
