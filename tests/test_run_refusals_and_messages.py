"""Refusals and messages that name the cause: nested output folders, methods a frozen model cannot train, sweep
points reusing a cell, trees sharing cells, an unreachable hub, own-data files that would train wrongly, values
given twice, compare's notes, and the help screen that loads no plugin."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clbench._exec import executors
from clbench.errors import ClbenchError


def _cell(root: Path) -> None:
    cell = root / "split-digits" / "ewc" / "order-1" / "seed-0"
    cell.mkdir(parents=True)
    (cell / "result.json").write_text("{}")


def test_a_tree_without_a_lock_file_still_refuses_an_out_inside_it(tmp_path):
    _cell(tmp_path / "tree")  # a committed tree: cells, no lock file
    with pytest.raises(ClbenchError, match="is inside the result tree of another run"):
        executors.check_not_nested(tmp_path / "tree" / "split-digits" / "x")
    executors.check_not_nested(tmp_path / "beside")  # beside it: fine


def test_a_folder_vanishing_while_the_nesting_check_looks_is_skipped(tmp_path, monkeypatch):
    # what a process exiting under /proc did to `clbench run --out runs` in / (5 of ~50 runs on a busy machine)
    (tmp_path / "a" / "gone").mkdir(parents=True)
    real = os.scandir

    def vanishing(path):
        if str(path).endswith("gone"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", vanishing)
    executors.check_not_nested(tmp_path / "a" / "out")


def test_the_nesting_check_never_lists_a_mount_point(monkeypatch, tmp_path):
    listed = []
    real = executors._holds_cells
    monkeypatch.setattr(executors, "_holds_cells", lambda root: listed.append(root) or real(root))
    executors.check_not_nested(Path("/out-probe-that-is-not-created"))
    assert Path("/") not in listed


def _jsonl(root: Path) -> Path:
    import json

    for task in ("t0", "t1"):
        (root / task).mkdir(parents=True)
        for split in ("train", "test"):
            rows = [{"sentence": f"{task} text {i}", "label": "pos" if i % 2 else "neg"} for i in range(6)]
            (root / task / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_a_method_the_frozen_text_model_cannot_train_is_refused_at_plan_time(tmp_path):
    from clbench import testing
    from clbench._core.plan import RunRequest, make_plan
    from clbench.config import parse_sets
    from clbench.errors import ConfigError

    regs, data = testing.registry(), str(_jsonl(tmp_path / "data"))
    with pytest.raises(ConfigError, match=r"ewc trains the model's own weights, which model 'encoder' keeps frozen "
                                          r"\(model.train_base=false\): add --set model.train_base=true"):
        make_plan(regs, RunRequest(methods="ewc", streams=["jsonl"], data_dir=data, out=tmp_path / "o"))
    plan = make_plan(regs, RunRequest(methods="all", streams=["jsonl"], data_dir=data, out=tmp_path / "o"))
    assert "ewc" not in {c.method for c in plan.cells} and "seqlora" in {c.method for c in plan.cells}
    assert any(line.startswith("ewc on jsonl: ewc trains the model's own weights") for line in plan.skipped)
    unfrozen = make_plan(regs, RunRequest(methods="ewc", streams=["jsonl"], data_dir=data, out=tmp_path / "o",
                                          sets=parse_sets(["model.train_base=true"])))
    assert {c.method for c in unfrozen.cells} == {"ewc"}  # one cell a seed


def test_the_untuned_notice_names_every_method_s_settings(tmp_path):
    from clbench import testing
    from clbench._cli.commands.run import _chosen_settings
    from clbench._core.plan import RunRequest, make_plan

    regs, data = testing.registry(), str(_jsonl(tmp_path / "data"))
    plan = make_plan(regs, RunRequest(methods="seqlora,expander", streams=["jsonl"], data_dir=data, out=tmp_path / "o"))
    [line] = _chosen_settings(regs, plan.cells)
    assert "expander: model encoder" in line and "seqlora: model encoder" in line and "not tuned for your data" in line


def test_a_method_without_a_preset_is_marked_as_running_on_the_defaults():
    from clbench._tools.leaderboard import console_summary, method_labels
    from clbench.cell import CellResult
    from clbench.method import Method
    from clbench.specs import MethodSpec

    specs = {"ewc": MethodSpec("ewc", Method, presets={"quick/split-digits": {"train.lr": 0.05}}),
             "mine": MethodSpec("mine", Method)}
    assert method_labels(["ewc", "mine", "mine+ewc"], specs, "quick", "split-digits") == {
        "ewc": "ewc", "mine": "mine (defaults)", "mine+ewc": "mine+ewc"}
    assert method_labels(["mine"], specs) == {"mine": "mine"}  # no profile and stream: nothing to say
    results = [CellResult(m, "split-digits", "1", s, ["a"], [[90.0]], metrics={"AA": 90.0 - s}, config={"profile": "quick"},
                          scenario="task-incremental") for m in ("ewc", "mine") for s in range(2)]
    assert "mine (defaults)" in console_summary(results, specs)


def test_a_sweep_point_equal_to_the_method_s_own_cell_reuses_it(tmp_path):
    from clbench import testing
    from clbench._core.results import read_result

    regs = testing.registry()
    [own] = testing.run(regs, tmp_path, "ewc", sets={"ewc.lambda": [10.0]})
    swept = {r.method: r for r in testing.run(regs, tmp_path, "ewc", sets={"ewc.lambda": [10.0, 30.0]})}
    assert set(swept) == {"ewc@lambda=10.0", "ewc@lambda=30.0"}
    twin = read_result(swept["ewc@lambda=10.0"].path)
    assert twin.accuracy_matrix == own.accuracy_matrix and twin.config_hash == own.config_hash
    assert twin.timings == own.timings  # copied, not trained again
    assert twin.config["sweep"] == {"ewc.lambda": 10.0} and twin.method == "ewc@lambda=10.0"
    assert swept["ewc@lambda=30.0"].timings != own.timings


def test_two_trees_sharing_a_cell_make_one_leaderboard(tmp_path, capsys):
    import shutil

    from clbench import testing
    from clbench._cli.main import main

    regs = testing.registry()
    testing.run(regs, tmp_path / "a", "seqft")
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # the same cell in a second tree (a grown copy)
    testing.run(regs, tmp_path / "b", "ewc")
    with pytest.raises(SystemExit) as exit_:
        main(["leaderboard", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "lb"), "--no-plots"])
        raise SystemExit(0)
    err = capsys.readouterr().err
    assert exit_.value.code in (0, None), err
    assert "1 cell with the same settings in more than one tree: read once" in err
    text = next((tmp_path / "lb").glob("*.md")).read_text()
    assert "| seqft" in text and "| ewc" in text


def test_the_cl_benchmark_from_an_unreachable_hub_fails_once_naming_the_data_dir(tmp_path, monkeypatch):
    from clbench_plugins._shared import cl_hub
    from clbench_plugins._shared.cl_data import GROUPS

    from clbench import hub
    from clbench.errors import HubUnreachable

    monkeypatch.setattr(hub, "_reached", (False, "no network here"))
    monkeypatch.setattr(cl_hub, "build_task", lambda *a: pytest.fail("tried the hub"))
    with pytest.raises(HubUnreachable, match=r"task 'dbpedia' comes from hub dataset .* \(no network here\).*"
                                             r"set stream.data_dir=PATH \(or --data-dir\)"):
        cl_hub.ensure_tasks(tmp_path, ["dbpedia", "amazon"], GROUPS)


def test_the_help_screen_loads_no_plugin_and_no_torch():
    import subprocess
    import sys

    code = ("import sys\nfrom clbench._cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().endswith("False"), done.stdout + done.stderr
    assert "Commands:" in done.stdout and "run" in done.stdout


class _Warner:
    """A method plugin whose method warns once a task, as the expander masks do."""

    from clbench.hookspecs import hookimpl

    @hookimpl
    def clbench_add_methods(self):
        import warnings

        from clbench.method import Method
        from clbench.specs import MethodSpec

        class Warner(Method):
            def before_task(self, task, index):
                super().before_task(task, index)
                warnings.warn(f"masks are crowded on {task}", UserWarning, stacklevel=2)

        return [MethodSpec("warner", Warner)]


def test_a_warning_inside_a_cell_names_the_cell_and_a_resumed_cell_says_so(tmp_path, capsys):
    import warnings

    from clbench import testing
    from clbench._core import console

    shown = warnings.showwarning
    console.one_line_warnings()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            regs = testing.registry(_Warner())
            killer = testing.KillAfterTask(0)
            regs.pm.register(killer)
            with pytest.raises(KeyboardInterrupt):
                testing.run(regs, tmp_path, "warner", sets={"train.checkpoint_every_s": [0]})
            regs.pm.unregister(killer)
            testing.run(regs, tmp_path, "warner", sets={"train.checkpoint_every_s": [0]})
    finally:
        warnings.showwarning = shown
    err = capsys.readouterr().err
    assert "warning: tiny-vector/warner/order-1/seed-0: masks are crowded on t0" in err
    assert "resumed tiny-vector/warner/order-1/seed-0 from its checkpoint: 1 of 2 tasks done" in err


def test_a_stream_without_a_model_for_the_profile_names_what_would_work():
    from clbench import testing
    from clbench._core.plan import RunRequest, make_plan
    from clbench.errors import ConfigError

    with pytest.raises(ConfigError, match=r"stream 'permuted-mnist' names no model for profile 'quick'; use --profile "
                                          r"bench \(model mlp\) or paper-lps \(model mlp\), or pass --model \(cifarnet, cnn, mlp, resnet18, vit-b16\)"):
        make_plan(testing.registry(), RunRequest(methods="seqft", streams=["permuted-mnist"]))


def test_own_data_offers_shuffled_orders_the_same_everywhere():
    from clbench_plugins.own_data.streams import _orders

    names = [f"t{i}" for i in range(6)]
    orders = _orders(names)
    assert list(orders) == ["1", "2", "3", "4", "5"] and orders["2"] == names[::-1]
    assert all(sorted(o) == names for o in orders.values())
    assert len({tuple(o) for o in orders.values()}) == 5  # five different orders
    assert _orders(names) == orders  # a fixed generator: the same on every call and machine


def test_a_task_folder_added_to_own_data_is_not_reused_over(tmp_path, capsys):
    import sys

    from clbench._cli.main import main

    sys.path.insert(0, str(Path(__file__).parent))
    from test_own_data import _digits_tasks

    data = _digits_tasks(tmp_path / "d", [(0, 1), (2, 3)])
    args = ["run", "--stream", "arrays", "--data-dir", str(data), "--methods", "seqft", "--seeds", "0",
            "--set", "train.epochs=1", "--no-progress", "--out", str(tmp_path / "runs")]
    with pytest.raises(SystemExit):
        main(args)
    _digits_tasks(tmp_path / "more", [(4, 5)])
    (tmp_path / "more" / "task0").rename(data / "task2")  # a third task folder beside the two
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(args)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err  # --on-change refuse: the 2-task result is not reused as the 3-task cell's
    assert "the stream's tasks changed: task0, task1 → task0, task1, task2" in err


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_tolerance_that_is_no_finite_number_is_refused(tmp_path, capsys, value):
    from clbench._cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["compare", str(tmp_path), str(tmp_path), "--atol", value])
    assert exit_.value.code == 2 and "is not a finite number ≥ 0" in capsys.readouterr().err


def test_compare_names_a_changed_task_list_instead_of_crashing():
    from clbench._tools.verify import compare
    from clbench.cell import CellResult

    a = CellResult("m", "s", "1", 0, ["t0", "t1"], [[1.0, 2.0], [3.0, 4.0]])
    b = CellResult("m", "s", "1", 0, ["t0", "t1", "t2"], [[1.0, 2.0, 0.0], [3.0, 4.0, 0.0], [1.0, 1.0, 1.0]])
    [delta], _, _ = compare({"k": a}, {"k": b})
    assert delta.note == "task list changed: t0, t1 → t0, t1, t2"


def test_compare_says_why_a_rerun_failed():
    from clbench._tools.verify import compare
    from clbench.cell import CellResult

    a = CellResult("m", "s", "1", 0, ["t0"], [[1.0]])
    b = CellResult("m", "s", "1", 0, ["t0"], [[None]], status="failed", error="DataError: /d/t0/test.npz is missing")
    [delta], _, _ = compare({"k": a}, {"k": b})
    assert delta.note == "status complete → failed: DataError: /d/t0/test.npz is missing"


def _arrays(root: Path, x, y=None, test_x=None, name: str = "t0") -> Path:
    import numpy as np

    task = root / name
    task.mkdir(parents=True, exist_ok=True)
    y = np.arange(len(x)) % 2 if y is None else y
    np.savez(task / "train.npz", x=x, y=y)
    np.savez(task / "test.npz", x=x if test_x is None else test_x, y=y[: len(x if test_x is None else test_x)])
    return root


@pytest.mark.parametrize(("make", "needle"), [
    (lambda np: dict(x=np.full((4, 3), 1e39)), "beyond float32's range"),
    (lambda np: dict(x=np.ones((4, 3)) + 1j), "x must be real numbers"),
    (lambda np: dict(x=np.ones((4, 0))), "x has no features"),
    (lambda np: dict(x=np.ones((4, 3)), test_x=np.ones((4, 5))), "inputs of shape (5,), but the train split's are (3,)"),
])
def test_own_arrays_that_would_train_wrongly_are_refused(tmp_path, make, needle):
    import numpy as np
    from clbench_plugins.own_data.streams import ArraysStream, OwnDataConfig

    from clbench.errors import DataError

    root = _arrays(tmp_path, **make(np))
    with pytest.raises(DataError, match=re_escape(needle)):
        ArraysStream(OwnDataConfig(str(root))).data("t0")


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_misleading_array_messages_now_say_what_is_wrong(tmp_path):
    import numpy as np
    from clbench_plugins.own_data.streams import ArraysStream, OwnDataConfig

    from clbench.errors import DataError

    (tmp_path / "a" / "t0" / "train.npz").mkdir(parents=True)  # a folder where the file should be
    with pytest.raises(DataError, match="is not a regular file"):
        ArraysStream(OwnDataConfig(str(tmp_path / "a")))
    (tmp_path / "b" / "t0").mkdir(parents=True)
    (tmp_path / "b" / "t0" / "train.npz").write_bytes(bytes(range(256)))  # random bytes
    with pytest.raises(DataError, match="its bytes are not NumPy's .npy/.npz format"):
        ArraysStream(OwnDataConfig(str(tmp_path / "b")))
    root = _arrays(tmp_path / "c", np.ones((4, 3)))
    (root / "t0" / "train").mkdir()
    np.save(root / "t0" / "train" / "X.npy", np.ones((4, 3)))
    with pytest.raises(DataError, match="keep one of the two layouts"):
        ArraysStream(OwnDataConfig(str(root)))
    _arrays(tmp_path / "d", np.ones((4, 3)))
    (tmp_path / "d" / "t1").symlink_to(tmp_path / "nowhere")
    with pytest.raises(DataError, match="no folder \\(missing, or a loop\\)"):
        ArraysStream(OwnDataConfig(str(tmp_path / "d")))


@pytest.mark.parametrize(("label", "needle"), [
    ("null", "'label' is null"), ('""', "'label' is empty"), ("[1]", "'label' is list"), ("NaN", "'label' is float"),
    ("1.0", "'label' is float"),
])
def test_jsonl_labels_that_are_no_class_are_refused(tmp_path, label, needle):
    from clbench_plugins.own_data.streams import JsonlStream, OwnDataConfig

    from clbench.errors import DataError

    task = tmp_path / "t0"
    task.mkdir()
    for split in ("train", "test"):
        (task / f"{split}.jsonl").write_text('{"sentence": "a", "label": "x"}\n' + f'{{"sentence": "b", "label": {label}}}\n')
    with pytest.raises(DataError, match=re_escape(needle)):
        JsonlStream(OwnDataConfig(str(tmp_path)))


def test_integer_and_string_labels_are_one_class_and_a_null_response_is_refused(tmp_path):
    from clbench_plugins.own_data.streams import JsonlStream, OwnDataConfig, PromptsConfig, PromptsStream

    from clbench.errors import DataError

    task = tmp_path / "j" / "t0"
    task.mkdir(parents=True)
    for split in ("train", "test"):
        (task / f"{split}.jsonl").write_text('{"sentence": "a", "label": 1}\n{"sentence": "b", "label": "1"}\n'
                                             '{"sentence": "c", "label": 2}\n')
    assert JsonlStream(OwnDataConfig(str(tmp_path / "j"))).tasks[0].labels == ("1", "2")
    task = tmp_path / "p" / "t0"
    task.mkdir(parents=True)
    for split in ("train", "test"):
        (task / f"{split}.jsonl").write_text('{"prompt": "q", "response": null}\n')
    with pytest.raises(DataError, match="'response' is null"):
        PromptsStream(PromptsConfig(str(tmp_path / "p")))


@pytest.mark.parametrize(("args", "needle"), [
    (["--methods", "seqft", "--methods", "ewc"], "--methods is given 2 times"),
    (["--methods=seqft", "--methods", "ewc"], "--methods is given 2 times"),
    (["--set", "train.lr=0.1", "--set", "train.lr=0.2"], "--set train.lr is given twice"),
    (["--seeds", ""], "--seeds '': names nothing"),
    (["--orders", " , "], "--orders ' , ': names nothing"),
    (["--methods", " "], "--methods '': names nothing"),
    (["--device-memory", ""], "--device-memory '': give a size"),
])
def test_a_value_given_twice_or_empty_is_refused_not_silently_replaced(tmp_path, capsys, args, needle):
    from clbench._cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["run", "--stream", "split-digits", "--dry-run", "--out", str(tmp_path), *args])
    assert exit_.value.code == 2 and needle in capsys.readouterr().err


@pytest.mark.parametrize(("args", "needle"), [
    (["-p", "no:clbench.local", "run", "--methods", "seqft", "--stream", "split-digits", "--dry-run"],
     "unknown executor 'local'; is it plugin 'clbench.local', disabled by -p no:clbench.local?"),
    (["run", "--methods", "seqft+seqft", "--stream", "split-digits", "--dry-run"],
     "'seqft' is given twice: a method composed with itself is one method"),
    (["run", "--set", "train.lr=0.01,0.01", "--methods", "seqft", "--dry-run"],
     "a comma makes a sweep of distinct values; a list is written in brackets, e.g. model.hidden=[256,256]"),
])
def test_messages_that_misled_now_point_at_the_cause(tmp_path, capsys, args, needle):
    from clbench._cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main([*args, "--out", str(tmp_path / "o")] if args[0] == "run" else [*args, "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2 and needle in capsys.readouterr().err


def test_show_on_a_binary_file_says_it_is_no_result(tmp_path, capsys):
    from clbench._cli.main import main

    path = tmp_path / "footprints.safetensors"
    path.write_bytes(bytes(range(256)))
    with pytest.raises(SystemExit) as exit_:
        main(["show", str(path)])
    assert exit_.value.code != 0 and "not a result.json (binary, not UTF-8 JSON text)" in capsys.readouterr().err
