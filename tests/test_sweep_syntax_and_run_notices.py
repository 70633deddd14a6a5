"""Sweeps and what a run tells its user: list-valued settings and sweeps, natural sweep order, every
`list settings` scope, one-line warnings, methods that do not apply, an unreachable hub, a stream without
presets."""

from __future__ import annotations

import pytest

from clbench import testing
from clbench._cli.main import main
from clbench._core.plan import RunRequest, make_plan
from clbench._tools.leaderboard import label_key, summarise
from clbench.config import parse_sets
from clbench.errors import ConfigError


def test_a_list_is_written_in_brackets_and_a_comma_outside_them_sweeps():
    assert parse_sets(["model.hidden=[512,512]"]) == {"model.hidden": [[512, 512]]}
    assert parse_sets(["model.hidden=[256],[512, 512]", "ewc.lambda=3,10"]) == {
        "model.hidden": [[256], [512, 512]], "ewc.lambda": [3, 10]}
    assert parse_sets(['stream.note="a,b",c']) == {"stream.note": ["a,b", "c"]}
    with pytest.raises(ConfigError, match=r"an unclosed \[ or \{"):
        parse_sets(["model.hidden=[1,2"])


def test_a_list_value_sweeps_into_cells_of_its_own(tmp_path):
    plan = make_plan(testing.registry(), RunRequest(profile=testing.TEST_PROFILE, methods="seqft",
                                                    streams=["tiny-vector"], out=tmp_path,
                                                    sets=parse_sets(["model.hidden=[8],[8,8]"])))
    assert sorted(list(c.model_config["hidden"]) for c in plan.cells) == [[8], [8, 8]]


def test_a_repeated_sweep_value_hints_at_the_list_syntax(tmp_path):
    with pytest.raises(ConfigError, match=r"model.hidden: 512 is given twice \(a comma makes a sweep of distinct "
                                          r"values; a list is written in brackets, e.g. model.hidden=\[256,256\]\)"):
        make_plan(testing.registry(), RunRequest(methods="seqft", streams=["split-digits"], out=tmp_path,
                                                 sets=parse_sets(["model.hidden=512,512"])))


def test_sweep_labels_order_by_their_numbers():
    labels = ["ewc@lambda=30", "ewc@lambda=3", "ewc@lambda=100", "ewc@lambda=10", "ewc", "lwf@alpha=x"]
    assert sorted(labels, key=label_key) == ["ewc", "ewc@lambda=3", "ewc@lambda=10", "ewc@lambda=30",
                                             "ewc@lambda=100", "lwf@alpha=x"]


def test_unranked_rows_keep_the_natural_order(tmp_path):
    """Rows without AA (failed cells) follow the ranked ones in label order, numbers as numbers."""
    from clbench.cell import CellResult

    results = [CellResult(f"ewc@lambda={v}", "s", "1", 0, ["a"], [[None]], status="failed") for v in (100, 3, 30)]
    assert [r.method for r in summarise(results).rows] == ["ewc@lambda=3", "ewc@lambda=30", "ewc@lambda=100"]


@pytest.mark.parametrize(("scope", "line"), [
    ("train", "  lr: float = 0.01  (> 0)"),
    ("metrics", "  tolerance: float = 0.001  (>= 0 and < 1)"),
    ("model", "  mlp: hidden, dropout, multi_head, bias"),
    ("stream", "  arrays: data_dir"),
    ("ewc", "  lambda: float = 100.0  (>= 0)"),
])
def test_every_settings_scope_lists(capsys, scope, line):
    with pytest.raises(SystemExit) as exit_:
        main(["list", "settings", scope])
        raise SystemExit(0)
    out = capsys.readouterr().out
    assert exit_.value.code in (0, None) and line in out.splitlines(), out


def test_a_warning_prints_once_on_one_line(capsys):
    import warnings

    from clbench._core import console

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        console.one_line_warnings()
        for _ in range(3):  # a third-party warning raised every step
            warnings.warn("masked_fill is deprecated;\n  use where() instead", UserWarning, stacklevel=1)
        warnings.warn("another one", UserWarning, stacklevel=1)
    assert capsys.readouterr().err.splitlines() == [
        "warning: masked_fill is deprecated; use where() instead", "warning: another one"]


def _run(capsys, tmp_path, *args):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--methods", "all", "--stream", "split-digits,permuted-digits", "--seeds", "0",
              "--set", "train.epochs=1", "--no-progress", "--out", str(tmp_path / "runs"), *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 0, err
    return err.splitlines()


@pytest.mark.slow  # every method on two streams: 43 cells
def test_methods_that_do_not_apply_are_one_line_unless_verbose(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")  # a user's own choice stays
    plan = make_plan(testing.registry(), RunRequest(methods="all", streams=["split-digits", "permuted-digits"],
                                                    out=tmp_path))
    quiet = _run(capsys, tmp_path)
    assert [line for line in quiet if line.startswith(("not run:", "skipped:"))] == [
        f"not run: {len(plan.skipped)} method/stream pairings that do not apply (a scenario a method cannot run in, "
        "a stream's preset of methods); -v lists them"]
    loud = _run(capsys, tmp_path, "-v")
    assert [line.removeprefix("skipped: ") for line in loud if line.startswith("skipped:")] == plan.skipped
    assert quiet[-2] == f"results: {tmp_path / 'runs'}/; leaderboard: clbench leaderboard {tmp_path / 'runs'} " \
                        f"(writes {tmp_path / 'runs' / 'leaderboard'}/)"
    import os

    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "0"


@pytest.fixture
def unreachable_hub(monkeypatch):
    """No network, as on this machine, decided afresh: the probe's answer and the offline variables it sets are
    undone after the test."""
    import socket

    from clbench import hub

    def refuse(*args, **kwargs):
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(hub, "_reached", None)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-hub-cache")
    return hub


def test_an_unreachable_hub_stops_the_run_in_seconds_once_naming_the_local_way(unreachable_hub, tmp_path, capsys):
    import time

    start = time.perf_counter()
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--stream", "permuted-mnist", "--model", "mlp", "--methods", "seqft,ewc", "--seeds", "0,1",
              "--jobs", "1", "--no-progress", "--out", str(tmp_path / "runs")])
    elapsed = time.perf_counter() - start
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and elapsed < 30, (elapsed, err)  # 25 s of retries per cell before
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith("error: the data set 'ylecun/mnist': on the Hugging Face Hub, which cannot be reached "
                           "(huggingface.co did not answer in ") and "pass --data-dir DIR" in line
    assert not list((tmp_path / "runs").rglob("result.json"))  # no cell is failed for the machine's fault
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1"  # the libraries load what is cached without retrying


def test_a_cached_hub_name_loads_offline_and_hf_hub_offline_is_honoured(unreachable_hub, tmp_path, monkeypatch):
    hub = unreachable_hub
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    (tmp_path / "models--org--model").mkdir()
    hub.require("org/model", "the model's weights", "pass --model-path")  # in the cache: no error
    from clbench.errors import HubUnreachable

    with pytest.raises(HubUnreachable, match=r"'org/other': on the Hugging Face Hub, which cannot be reached"):
        hub.require("org/other", "the model's weights", "pass --model-path")
    monkeypatch.setattr(hub, "_reached", None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.reachable() == (False, "HF_HUB_OFFLINE is set")


def test_the_readmes_python_block_loads_a_run(tmp_path, monkeypatch):
    """The README's "Results in Python" snippet, run as written on a fresh run."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    [block] = re.findall(r"```python\n(from clbench\.leaderboard import load\n.*?)```", readme, re.S)
    monkeypatch.chdir(tmp_path)
    testing.run(testing.registry(), tmp_path / "runs", "seqft", stream="split-digits", profile="quick", orders=["1"],
                sets={"train.epochs": [1]})
    scope: dict = {}
    exec(block, scope)  # noqa: S102 - the documented snippet itself
    df = scope["df"]
    assert set(df["method"]) == {"seqft"} and df.loc[df["metric"] == "AA", "value"].notna().all()


def test_a_stream_without_a_preset_says_it_trains_with_the_defaults(tmp_path):
    from clbench._cli.commands.run import _chosen_settings

    regs = testing.registry()
    plan = make_plan(regs, RunRequest(methods="seqft", streams=["tiny-vector", "split-digits"], model="mlp",
                                      seeds=[0], out=tmp_path))  # tiny-vector has a preset for `test` only
    assert _chosen_settings(regs, plan.cells) == [
        "tiny-vector: seqft: model mlp, 1 epoch a task, sgd lr 0.01, batch 32 (no preset for profile 'quick': the "
        "defaults: --model, --set train.lr=... change them; `clbench list settings train`)"]
