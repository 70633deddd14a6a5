"""`train.memory`: one memory budget, in stored examples, that every method keeping examples obeys by the rule it
declares (in total, or a task), recorded in every result and shown on the summary's row."""

from __future__ import annotations

import dataclasses

import pytest

from clbench import hookimpl, testing
from clbench._core.cells import explain
from clbench._core.plan import RunRequest, make_plan
from clbench._tools.summary import memory_of, summarise, summary_table
from clbench.cell import CellResult
from clbench.config import parse_sets
from clbench.errors import ConfigError, PluginError
from clbench.specs import Memory, MemorySpec

STREAM = "split-digits-cil"  # 5 tasks, class-incremental (where every method here runs)


@pytest.fixture(scope="module")
def regs():
    return testing.registry()


def _cells(regs, tmp_path, methods, **sets):
    req = RunRequest(methods=methods, streams=[STREAM], seeds=[0], orders=["1"],
                     sets=parse_sets([f"{k}={v}" for k, v in sets.items()]), out=tmp_path)
    return req, make_plan(regs, req).cells


def test_each_method_gets_its_setting_from_the_budget_by_its_own_rule(regs, tmp_path):
    _, cells = _cells(regs, tmp_path, "replay,gem,agem,der,icarl,gdumb,er-ace", **{"train.memory": 500})
    got = {c.parts[0]: cfg for c in cells for cfg in c.methods_cfg.values()}
    tasks = {len(c.tasks) for c in cells}
    assert tasks == {5}
    assert got["gem"].memory_per_task == got["agem"].memory_per_task == 500 // 5 == 100
    assert got["replay"].buffer_size == got["der"].buffer_size == got["er-ace"].buffer_size == 500
    assert got["icarl"].memory_size == got["gdumb"].memory_size == 500
    assert {c.train.memory for c in cells} == {500}


def test_a_method_keeping_no_example_keeps_its_identity(regs, tmp_path):
    _, [plain] = _cells(regs, tmp_path / "a", "ewc")
    req, [budgeted] = _cells(regs, tmp_path / "b", "ewc", **{"train.memory": 500})
    assert budgeted.train.memory == 0
    assert budgeted.config_hash == plain.config_hash
    origins = {o.key: o for o in explain(regs, req, budgeted)}
    assert (origins["train.memory"].layer, origins["train.memory"].shadowed) == (
        "no part keeps examples", (("--set", 500),))


def test_the_budget_is_recorded_and_named_as_the_settings_layer(regs, tmp_path):
    _, [plain] = _cells(regs, tmp_path / "a", "gem")
    req, [cell] = _cells(regs, tmp_path / "b", "gem", **{"train.memory": 50})
    assert cell.resolved()["train"]["memory"] == 50
    assert cell.config_hash != plain.config_hash
    origins = {o.key: o for o in explain(regs, req, cell)}
    assert (origins["gem.memory_per_task"].value, origins["gem.memory_per_task"].layer) == (10, "train.memory")


@pytest.mark.parametrize(("methods", "sets", "message"), [
    ("gem", {"train.memory": 4}, "leaves gem no example a task"),
    ("replay", {"train.memory": 300, "replay.buffer_size": 100}, "say different things"),
])
def test_budgets_that_cannot_be_kept_are_refused_naming_why(regs, tmp_path, methods, sets, message):
    with pytest.raises(ConfigError, match=message):
        _cells(regs, tmp_path, methods, **sets)


class _ReplayB:
    """replay again as "replay-b", its memory declared in its own spec."""

    @hookimpl
    def clbench_add_methods(self):
        return [dataclasses.replace(testing.registry().methods.get("replay"), name="replay-b",
                                    memory=Memory("buffer_size"))]


def test_two_parts_keeping_examples_are_refused_one_budget(tmp_path):
    regs = testing.registry(_ReplayB())
    with pytest.raises(ConfigError, match="replay and replay-b both keep examples"):
        _cells(regs, tmp_path, "replay+replay-b", **{"train.memory": 300})
    _, [cell] = _cells(regs, tmp_path, "replay+replay-b")  # each on its own setting: runs
    assert cell.train.memory == 0


def test_the_same_value_set_twice_is_not_a_conflict(regs, tmp_path):
    _, [cell] = _cells(regs, tmp_path, "replay", **{"train.memory": 300, "replay.buffer_size": 300})
    assert cell.methods_cfg["replay"].buffer_size == 300


class _Declares:
    def __init__(self, *specs):
        self.specs = specs

    @hookimpl
    def clbench_add_memory(self):
        return list(self.specs)


@pytest.mark.parametrize(("spec", "message"), [
    (MemorySpec("ewc", Memory("buffer_size")), "EWCConfig does not have"),
    (MemorySpec("replya", Memory("buffer_size")), "did you mean 'replay'"),
    (MemorySpec("gem", Memory("memory_per_task", per="task")), "registered twice"),
])
def test_a_declaration_that_names_nothing_real_is_refused(spec, message):
    with pytest.raises(PluginError, match=message):
        testing.registry(_Declares(spec))


def test_a_method_declares_its_memory_in_one_place():
    with pytest.raises(PluginError, match="has memory of its own .* give them in one place"):
        testing.registry(_ReplayB(), _Declares(MemorySpec("replay-b", Memory("buffer_size"))))


def test_a_run_keeps_what_the_budget_gives(tmp_path):
    """GEM's report counts the examples it kept of each task: 2 tasks × 24 // 2 = 12 each; the result records one
    example's bytes (the tiny stream's 8 float32 features)."""
    regs = testing.registry()
    [result] = testing.run(regs, tmp_path, "gem", sets={"train.memory": [24]})
    assert list(result.report["memory_per_task"].values()) == [12, 12]
    stream = testing.TinyVectorStream()
    x = stream.data(result.tasks[0]).train.x
    assert result.compute["example_bytes"] == x[0].nbytes == x.shape[1] * 4
    assert memory_of(result, regs.methods) == 24


def _result(method, memory=None, example_bytes=None):
    config = {"methods": {method: {} if memory is None else {"buffer_size": memory}}}
    return CellResult(method, STREAM, "1", 0, ["a", "b"], [[90.0, 0.0], [80.0, 70.0]], metrics={"AA": 75.0},
                      config=config, compute={"example_bytes": example_bytes} if example_bytes else None)


def test_the_summary_shows_memory_and_flags_a_row_that_keeps_another_amount():
    base = testing.registry()
    specs = {name: base.methods.get(name) for name in ("replay", "der", "ewc")}
    specs["der"] = dataclasses.replace(specs["der"], memory=Memory("buffer_size", per="task"))
    specs["replay-b"] = dataclasses.replace(specs["replay"], name="replay-b")

    def memory_column(results):
        text = summary_table(summarise(results, specs))
        rows = {line.split("|")[2].strip(): line for line in text.splitlines() if line.startswith("|")}
        column = [c.strip() for c in rows["method"].split("|")].index("memory")
        return {m: [c.strip() for c in rows[m].split("|")][column] for m in rows if m not in ("method", "-" * len(m))}

    # replay: 200 examples of 3,136 bytes; der: 200 a task × 2 tasks; ewc keeps none; replay-b as replay
    results = [_result("replay", 200, example_bytes=3136), _result("der", 200), _result("ewc")]
    assert memory_column([*results, _result("replay-b", 200)]) == {
        "replay": f"200 ({200 * 3136 / 1024:.1f} KiB)", "replay-b": "200", "der": "400 ⚑", "ewc": "—"}
    # two amounts, neither kept by more rows: both flagged
    assert memory_column(results) == {"replay": f"200 ({200 * 3136 / 1024:.1f} KiB) ⚑", "der": "400 ⚑", "ewc": "—"}
    # a per-task split's remainder is not a difference: 98 a task of 2 (196, 2 % under 200) is not flagged, 97 is
    for per_task, flag in ((98, ""), (97, " ⚑")):
        results = [_result("replay", 200), _result("replay-b", 200), _result("der", per_task)]
        assert memory_column(results)["der"] == f"{2 * per_task}{flag}"


def test_cells_under_a_budget_form_their_own_board_named_by_it():
    from types import SimpleNamespace

    from clbench._tools.leaderboard import board_title, by_profile

    def cell(steps: int, memory: int) -> SimpleNamespace:
        return SimpleNamespace(stream="s", config={"profile": "bench", "train": {"steps_per_task": steps,
                                                                                  "memory": memory}})

    cells = [cell(0, 0), cell(0, 200), cell(0, 500), cell(85, 200)]
    boards = by_profile(cells)  # type: ignore[arg-type]
    assert {k: len(v) for k, v in boards.items()} == {
        "bench": 1, "bench-memory-200": 1, "bench-memory-500": 1, "bench-equal-steps-memory-200": 1}
    # a profile that is the track (`bench-memory-500`, presets tuned at that memory) is its board, named once
    track = SimpleNamespace(stream="s", config={"profile": "bench-memory-500", "train": {"memory": 500}})
    assert list(by_profile([track])) == ["bench-memory-500"]  # type: ignore[list-item]
    assert board_title("bench-memory-500", [track]) == (  # type: ignore[list-item]
        "clbench leaderboard — profile `bench-memory-500` at equal memory: every method that keeps examples keeps "
        "500 (`train.memory`)")
    assert board_title("bench", boards["bench"]) == "clbench leaderboard — profile `bench`"
    assert board_title("bench-memory-500", boards["bench-memory-500"]) == (
        "clbench leaderboard — profile `bench` at equal memory: every method that keeps examples keeps 500 "
        "(`train.memory`)")
    both = board_title("bench-equal-steps-memory-200", boards["bench-equal-steps-memory-200"])
    assert both.startswith("clbench leaderboard — profile `bench` at equal steps: every method 85 optimizer steps")
    assert both.endswith("; at equal memory: every method that keeps examples keeps 200 (`train.memory`)")


def test_the_benchmarks_memory_track_runs_the_methods_that_keep_examples_at_the_budget():
    import argparse
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_quick.py"
    spec = importlib.util.spec_from_file_location("bench_quick", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from clbench._core.cells import profile_lineage

    regs = testing.registry()
    keeping = sorted(n for n in regs.methods if regs.methods.get(n).memory is not None)
    assert keeping == sorted(["replay", "der", "derpp", "er-ace", "gdumb", "icarl", "gem", "agem"])
    for m in (200, 500):
        # the track is a profile of its own: the bench profile's methods that keep examples at M, its own presets
        spec = regs.profiles.get(f"bench-memory-{m}")
        assert sorted(spec.methods) == keeping and dict(spec.sets) == {"train.memory": m}
        assert profile_lineage(regs, spec.name) == ("bench", spec.name)
        assert spec.seeds == regs.profiles.get("bench").seeds
    [line] = bench.commands("bench", bench.track_name("memory-500"), [])
    assert line == ["clbench", "run", "--profile", "bench-memory-500"]
    for bad in ("memory-0", "memory-x", "memory"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.track_name(bad)
