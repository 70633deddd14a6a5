"""`clbench run --explain`: every setting of a cell with the layer that gave its value, and the values it replaced."""

from __future__ import annotations

import dataclasses

import pytest

from clbench import config as cfg
from clbench import hookimpl, testing
from clbench._cli.main import main
from clbench._core.cells import explain
from clbench._core.plan import RunRequest, make_plan
from clbench.config import parse_sets

STREAM = "split-digits"


class _TwoPresetMethods:
    """ewc and lwf again, under names whose presets both set train.lr: the later part of a combination wins."""

    @hookimpl
    def clbench_add_methods(self):
        base = testing.registry()
        return [
            dataclasses.replace(base.methods.get("ewc"), name="ewc-p",
                                presets={"quick": {"train.lr": 0.1, "lambda": 7.0},
                                         f"quick/{STREAM}": {"train.epochs": 2}}),
            dataclasses.replace(base.methods.get("lwf"), name="lwf-p", presets={f"quick/{STREAM}": {"train.lr": 0.2}}),
        ]


@pytest.fixture(scope="module")
def regs():
    return testing.registry(_TwoPresetMethods())


def _cell(regs, tmp_path, **sets):
    req = RunRequest(methods="ewc-p+lwf-p", streams=[STREAM], seeds=[0], orders=["1"],
                     sets=parse_sets([f"{k}={v}" for k, v in sets.items()]), out=tmp_path)
    [cell] = make_plan(regs, req).cells
    return req, cell, {o.key: o for o in explain(regs, req, cell)}


def test_each_value_names_its_layer_and_what_it_replaced(regs, tmp_path):
    req, cell, origins = _cell(regs, tmp_path, **{"train.batch_size": 7})
    stream_preset = cfg.preset_values(regs.streams.get(STREAM).presets, "quick", STREAM, "1")
    lr = origins["train.lr"]
    assert (lr.value, lr.layer) == (cell.train.lr, f"method lwf-p preset 'quick/{STREAM}'") == (0.2, lr.layer)
    # below it: the stream's preset (read from the spec here), then the first part's
    below = [(f"stream {STREAM} preset {k!r}", v["train.lr"]) for k, v in regs.streams.get(STREAM).presets.items()
             if k in ("quick", f"quick/{STREAM}", f"quick/{STREAM}/1") and "train.lr" in v]
    assert list(lr.shadowed) == [*below, ("method ewc-p preset 'quick'", 0.1)]
    assert (origins["train.epochs"].value, origins["train.epochs"].layer) == (2, f"method ewc-p preset 'quick/{STREAM}'")
    assert (origins["ewc-p.lambda"].value, origins["ewc-p.lambda"].layer) == (7.0, "method ewc-p preset 'quick'")
    assert (origins["train.batch_size"].value, origins["train.batch_size"].layer) == (7, "--set")
    assert origins["model"].value == cell.model == stream_preset["model"]
    # a setting no layer sets is its config class's default, and the cell has exactly that value
    defaults = {f"train.{k}": v for k, v in cfg.to_dict(cfg.TrainConfig()).items()}
    shown = {k: o.value for k, o in origins.items() if o.layer == "default" and k.startswith("train.")}
    assert shown and shown == {k: defaults[k] for k in shown}
    assert all(defaults[k] == cfg.to_dict(cell.train)[k.removeprefix("train.")] for k in shown)
    # every setting the cell stores is explained once
    stored = cell.resolved()
    assert len(origins) == 1 + sum(len(stored[s]) for s in ("train", "stream", "metrics")) + len(stored["model"]) - 1 \
        + sum(len(v) for v in stored["methods"].values())


def test_a_swept_value_is_the_user_s(regs, tmp_path):
    req = RunRequest(methods="ewc-p", streams=[STREAM], seeds=[0], orders=["1"],
                     sets=parse_sets(["ewc-p.lambda=1,3"]), out=tmp_path)
    cells = make_plan(regs, req).cells
    got = {c.method: {o.key: o for o in explain(regs, req, c)}["ewc-p.lambda"] for c in cells}
    assert {m: (o.value, o.layer, o.shadowed) for m, o in got.items()} == {
        "ewc-p@lambda=1": (1.0, "--set", (("method ewc-p preset 'quick'", 7.0),)),
        "ewc-p@lambda=3": (3.0, "--set", (("method ewc-p preset 'quick'", 7.0),))}


def test_run_explain_prints_the_trace_and_trains_nothing(tmp_path, capsys):
    out = tmp_path / "runs"
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--methods", "ewc", "--stream", STREAM, "--seeds", "0,1", "--orders", "1", "--set",
              "train.lr=0.03", "--out", str(out), "--explain"])
    captured = capsys.readouterr()
    assert exit_.value.code == 0, captured.err
    assert not out.exists()
    lines = captured.out.splitlines()
    assert f"ewc on {STREAM} (order 1; seed 0, 1: 2 cells)" in lines
    [lr] = [line for line in lines if line.split()[:1] == ["train.lr"]]
    assert lr.split()[1:4] == ["0.03", "←", "--set;"]
    assert lines[-1].strip().endswith("at the default: -v lists them)")


class _StreamSettingsInPresets:
    """A method preset and an order's preset that set a stream setting: neither can apply to a stream built once
    for every method and order of a run."""

    @hookimpl
    def clbench_add_methods(self):
        base = testing.registry().methods.get("ewc")
        return [dataclasses.replace(base, name="ewc-s", presets={f"quick/{STREAM}": {"stream.val_fraction": 0.2}})]

    @hookimpl
    def clbench_add_streams(self):
        base = testing.registry().streams.get(STREAM)
        return [dataclasses.replace(base, name="digits-o", presets={
            **base.presets, "quick/digits-o/1": {"stream.val_fraction": 0.2}})]


@pytest.mark.parametrize(("method", "stream", "owner"), [("ewc-s", STREAM, "method 'ewc-s'"),
                                                         ("ewc", "digits-o", "stream 'digits-o'")])
def test_a_stream_setting_in_a_method_or_order_preset_is_refused(tmp_path, method, stream, owner):
    from clbench.errors import PluginError

    regs = testing.registry(_StreamSettingsInPresets())
    with pytest.raises(PluginError, match=rf"{owner}.* sets stream\.val_fraction: a stream's settings are the same"):
        make_plan(regs, RunRequest(methods=method, streams=[stream], seeds=[0], orders=["1"], out=tmp_path))
