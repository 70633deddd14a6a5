"""Ranking and scenarios: one scenario per leaderboard table, blow-ups shown as diverged, a ranked summary, and
the head contract (a shared head is a shared parameter)."""

from __future__ import annotations

import math

import pytest
import torch
from faultsuite import BlowingUp  # adds 1e4 to the loss from the second epoch of the second task

from clbench import testing
from clbench._core.plan import RunRequest, make_plan
from clbench._core.results import read_result
from clbench._tools.leaderboard import console_summary, render, summary_table
from clbench.cell import CellResult
from clbench.config import TrainConfig
from clbench.data import SCENARIOS, Stream, TaskInfo
from clbench.errors import ConfigError
from clbench.hookspecs import hookimpl
from clbench.method import Method
from clbench.model import StreamInfo
from clbench.specs import MethodSpec, MetricSpec


# --------------------------------------------------------------------------- blow-ups are results
class BlowupPlugin:
    @hookimpl
    def clbench_add_methods(self):
        return [MethodSpec("blowup", BlowingUp)]


def test_an_exploding_epoch_is_diverged_with_where_it_happened(tmp_path):
    regs = testing.registry(BlowupPlugin())
    [r] = testing.run(regs, tmp_path / "on", "blowup")
    assert r.status == "diverged"
    d = r.divergence
    stream = testing.TinyVectorStream()
    steps = [-(-len(stream.data(t).train) // 16) for t in r.tasks]  # batch 16, 2 epochs (the test profile)
    first = r.timings["tasks"][0]  # task 1 finished; task 2 stopped in its second epoch
    assert {k: d[k] for k in ("task", "index", "phase", "epoch", "step")} == {
        "task": r.tasks[1], "index": 1, "phase": "train", "epoch": 2, "step": 2 * steps[0] + 2 * steps[1]}
    assert first["train"]["steps"] == 2 * steps[0]
    # the epoch's mean is 1e4 plus the task loss (a cross-entropy of 2 classes: below 1 once learned, never 10)
    assert 1e4 < d["loss"] < 1e4 + 10 and 0 < d["reference"] < 10 and d["loss"] > 100 * d["reference"]
    assert f"task {r.tasks[1]!r} (task 2, phase train, epoch 2, step {d['step']})" in r.error
    assert r.accuracy_matrix[0][0] is not None and r.accuracy_matrix[1] == [None, None]
    on_disk = read_result(r.path)
    assert on_disk.divergence == d and on_disk.status == "diverged"
    # the same cell with the check off completes: the constant term moves no weight
    [off] = testing.run(regs, tmp_path / "off", "blowup", sets={"train.diverge_factor": [0.0]})
    assert off.status == "complete" and off.divergence is None


def test_a_nan_step_records_its_step():
    from clbench._exec.step import _diverged

    exc = _diverged("loss became nan", "t1", 1, "train", 0, 7, float("nan"), None)
    assert exc.where == {"task": "t1", "index": 1, "phase": "train", "epoch": 1, "step": 7, "loss": "nan",
                         "reference": None}
    assert str(exc) == "loss became nan on task 't1' (task 2, phase train, epoch 1, step 7)"


def _cell(method: str, seed: int, aa: float | None, status: str = "complete", scenario: str = "domain-incremental",
          stream: str = "s", fra: float = 1.0) -> CellResult:
    metrics = {} if aa is None else {"AA": aa, "F.Ra": fra}
    return CellResult(method=method, stream=stream, order="1", seed=seed, tasks=["a"], accuracy_matrix=[[1.0]],
                      metrics=metrics, status=status, config={"profile": "p"}, scenario=scenario)


AA = MetricSpec("AA", lambda inp: None, "up")  # type: ignore[arg-type]
FRA = MetricSpec("F.Ra", lambda inp: None, "down")  # type: ignore[arg-type]


def test_a_diverged_row_is_shown_as_such_and_never_averaged():
    from clbench._tools.leaderboard import summarise

    results = [_cell("ewc", 0, 90.0), _cell("ewc", 1, None, "diverged"), _cell("ewc", 2, 92.0),
               _cell("seqft", 0, 50.0), _cell("seqft", 1, 52.0), _cell("seqft", 2, 54.0)]
    text = render(results, [AA, FRA], "T")
    assert "| ewc      | diverged (1 of 3 cells) | diverged (1 of 3 cells) |" in text
    # the only judged row is seqft, the reference; ewc is listed after it, unranked, without an F.Ra
    table = summary_table(summarise(results), cost=False)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    assert rows == [["1", "seqft", "52.00 (50.00–54.00)", "1.00 ± 0.00", "3", "best", ""],
                    ["—", "ewc", "diverged (1 of 3 cells)", "", "3", "", ""]]


def _eight(method: str, offset: float) -> list[CellResult]:
    seeds = [50.0, 53.0, 47.0, 51.0, 49.0, 55.0, 45.0, 52.0]  # far more spread than the gaps between methods
    return [_cell(method, s, v + offset) for s, v in enumerate(seeds)]


def test_the_summary_ranks_by_aa_and_says_which_rows_are_separated():
    # a leads b by 0.2 and c by 10 in every one of 8 paired cells, and b leads c: c is below (its deficit minus
    # Δ = 1 has one sign in every cell: p = 1/2^8, Holm × 6 ordered pairs = 0.023); b is behind (p of a lead at
    # all: the same), within Δ
    text = console_summary(_eight("c", 0.0) + _eight("a", 10.0) + _eight("b", 9.8))
    lines = text.splitlines()
    assert lines[0] == "s — domain-incremental: no task identity at test time, one shared head"
    ranked = [line.split() for line in lines[3:]]
    # the cells are resampled together (paired): b trails a in every replicate, so the rank intervals are points
    assert [(r[0], r[1], r[2], r[3]) for r in ranked] == [
        ("1", "a", "60.25", "(57.62–62.75)"), ("2", "b", "60.05", "(57.42–62.55)"), ("3", "c", "50.25", "(47.62–52.75)")]
    assert [r[8:] for r in ranked] == [["best"], ["behind", "0.20", "(0.023)"], ["below", "10.00", "(0.023)"]]


def test_three_seeds_separate_nothing_and_say_so():
    text = console_summary([_cell(m, s, v + s) for m, v in (("a", 80.0), ("b", 70.0)) for s in range(3)])
    assert [line.split()[8:] for line in text.splitlines()[3:]] == [["best"],
                                                                    ["not", "separated", "10.00", "(0.25)"]]
    from clbench._tools.leaderboard import summarise, summary_caption

    caption = summary_caption(summarise([_cell(m, s, v) for m, v in (("a", 80.0), ("b", 70.0)) for s in range(3)]))
    assert "With 3 paired cells and 2 comparisons no Holm-adjusted p can be below 0.25: nothing here can be" in caption


def test_one_seed_separates_nothing():
    text = console_summary([_cell("a", 0, 80.0), _cell("b", 0, 70.0)])
    assert [line.split()[5:] for line in text.splitlines()[3:]] == [["best"],
                                                                    ["not", "separated", "10.00", "(1)"]]


def test_two_scenarios_of_one_stream_are_never_ranked_together():
    results = [_cell("a", s, 80.0 + s) for s in range(2)] + \
              [_cell("b", s, 90.0 + s, scenario="task-incremental") for s in range(2)]
    text = render(results, [AA, FRA], "T")
    assert "## s — domain-incremental" in text and "## s — task-incremental" in text
    domain = text.split("## s — domain-incremental")[1].split("## ")[0]
    assert "| a " in domain and "| b " not in domain


def test_tags_and_methods_that_cannot_run_are_shown():
    specs = {"joint": MethodSpec("joint", Method, tags=frozenset({"upper-bound"})),  # the tag before "reference"
             "packnet": MethodSpec("packnet", Method, scenarios=frozenset({"task-incremental"})),
             "icarl": MethodSpec("icarl", Method, scenarios=frozenset({"class-incremental"}))}
    results = [_cell("joint", s, 95.0) for s in range(2)] + \
              [_cell("packnet", s, 90.0, scenario="task-incremental", stream="t") for s in range(2)] + \
              [_cell("icarl", s, 80.0, scenario="class-incremental", stream="c") for s in range(2)]
    text = render(results, [AA, FRA], "T", methods=specs)
    assert "joint (oracle, defaults)" in text and "Oracle rows" in text  # no preset for profile p either
    section = text.split("## s — domain-incremental")[-1].split("## ")[0]
    assert "Cannot run in this scenario (built on the task identity at test time): packnet." in section
    # iCaRL is left out for the opposite reason: it never takes the task identity
    assert ("Cannot run in this scenario (built to predict among every label seen so far, without the task "
            "identity): icarl.") in section


# --------------------------------------------------------------------------- scenarios at planning
def test_every_quick_stream_says_its_scenario():
    regs = testing.registry()
    scenarios = {name: regs.streams.get(name).factory(regs.streams.get(name).config_cls()).scenario
                 for name in ("permuted-digits", "permuted-digits-til", "split-digits", "cl-quick")}
    assert scenarios == {"permuted-digits": "domain-incremental", "permuted-digits-til": "task-incremental",
                         "split-digits": "task-incremental", "cl-quick": "task-incremental"}
    assert set(scenarios.values()) <= set(SCENARIOS)


def test_a_method_that_needs_the_task_identity_is_refused_or_reported_not_moved(tmp_path):
    regs = testing.registry()
    with pytest.raises(ConfigError, match="'packnet' cannot run on stream 'permuted-digits': runs only "
                                          "task-incremental .* 'permuted-digits' is domain-incremental"):
        make_plan(regs, RunRequest(methods="packnet", streams=["permuted-digits"], out=tmp_path))
    plan = make_plan(regs, RunRequest(methods="all", streams=["permuted-digits"], out=tmp_path))
    planned = {c.method for c in plan.cells}
    assert {"packnet", "lps", "pertask-expander", "pertask-random"}.isdisjoint(planned)
    assert {"ewc", "seqft", "joint", "lwf", "replay"} <= planned
    skipped = {line.split(" on ")[0] for line in plan.skipped if "task-incremental" in line}
    assert skipped == {"lps", "packnet", "pertask-expander", "pertask-random", "pertaskft", "sm"}
    til = make_plan(regs, RunRequest(methods="all", streams=["permuted-digits-til"], out=tmp_path))
    assert {"packnet", "lps", "pertask-expander", "pertask-random", "ewc", "seqft"} <= {c.method for c in til.cells}


def test_icarl_is_refused_on_a_task_incremental_stream_for_the_reason_it_has(tmp_path):
    """iCaRL classifies by the nearest mean of exemplars among every class seen so far, never told the task: it is
    refused where the task identity is given because it declares class-incremental, not because it needs one."""
    regs = testing.registry()
    with pytest.raises(ConfigError) as refused:
        make_plan(regs, RunRequest(methods="icarl", streams=["split-digits"], out=tmp_path))
    message = str(refused.value)
    assert ("'icarl' cannot run on stream 'split-digits': runs only class-incremental (built to predict among every "
            "label seen so far, without the task identity); 'split-digits' is task-incremental") in message
    assert "uses the task identity" not in message
    with pytest.raises(ConfigError, match=r"runs only task-incremental \(built on the task identity at test time\)"):
        make_plan(regs, RunRequest(methods="packnet", streams=["permuted-digits"], out=tmp_path))


def test_a_head_setting_that_changes_the_scenario_is_refused(tmp_path):
    regs = testing.registry()
    for stream, value in (("permuted-digits", True), ("permuted-digits-til", False)):
        with pytest.raises(ConfigError, match=f"model.multi_head={str(value).lower()} on stream '{stream}'"):
            make_plan(regs, RunRequest(methods="seqft", streams=[stream], out=tmp_path,
                                       sets={"model.multi_head": [value]}))


def test_a_cell_records_its_scenario(tmp_path):
    [r] = testing.run(testing.registry(), tmp_path, "seqft")  # tiny-vector: one head per task
    assert r.scenario == "task-incremental" and read_result(r.path).scenario == "task-incremental"


def test_the_default_scenario_follows_the_heads_and_label_sets():
    def stream(labels: list[tuple[str, ...]], multi_head: bool) -> Stream:
        return Stream("x", [TaskInfo(f"t{i}", ls) for i, ls in enumerate(labels)], {"1": ["t0"]},
                      multi_head=multi_head)

    assert stream([("a", "b"), ("a", "b")], False).scenario == "domain-incremental"
    assert stream([("a", "b"), ("a", "b")], True).scenario == "task-incremental"
    assert stream([("a", "b"), ("c", "d")], False).scenario == "task-incremental"  # scored among its own labels
    with pytest.raises(Exception, match="scenario 'open-world' is none of"):
        Stream("x", [TaskInfo("t0", ("a",))], {"1": ["t0"]}, scenario="open-world")


# --------------------------------------------------------------------------- the head contract
def _mlp(multi_head: bool):
    from clbench_plugins.mlp.model import MLPConfig, build

    tasks = tuple(TaskInfo(f"t{i}", ("a", "b")) for i in range(2))
    return build(MLPConfig(hidden=(8,)), StreamInfo("x", tasks, "vector", (4,), multi_head))


def test_a_shared_head_is_a_shared_parameter():
    shared, per_task = _mlp(False), _mlp(True)
    assert shared.head_parameter_names() == set()
    assert shared.output_parameter_names() == {"heads.shared.weight", "heads.shared.bias"}
    assert per_task.head_parameter_names() == per_task.output_parameter_names() == {
        "heads.t0.weight", "heads.t0.bias", "heads.t1.weight", "heads.t1.bias"}
    for model in (shared, per_task):  # masks, pruning and adapters never touch an output layer
        assert not any(name.startswith("heads") for name in model.adaptable_layers())


def test_ewc_penalises_a_shared_head_and_not_a_task_s_own():
    from clbench_plugins.ewc.config import EWCConfig
    from clbench_plugins.ewc.method import EWC

    from clbench.method import CellContext

    for multi_head in (False, True):
        model = _mlp(multi_head)
        ctx = CellContext(stream=None, order=["t0", "t1"], train=TrainConfig(), device=torch.device("cpu"), seed=0)
        ewc = EWC(EWCConfig(lambda_=2.0), ctx)
        ewc.setup(model)
        names = set(ewc.penalized())
        assert ("heads.shared.weight" in names) is not multi_head
        assert not any(n.startswith("heads.t") for n in names)
        # the penalty over a moved head, against (λ/2) Σ F (θ − θ*)² summed by hand over every penalised weight
        ewc.anchor = {n: p.detach().clone() for n, p in ewc.penalized().items()}
        ewc.fisher = {n: torch.full_like(p, 0.5) for n, p in ewc.penalized().items()}
        ewc._weigh()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1)
        value = float(ewc.loss_terms(None, None)["ewc"])
        expected = sum(0.5 * 2.0 * 0.5 * 0.01 * p.numel() for n, p in model.named_parameters() if n in names)
        assert math.isclose(value, expected, rel_tol=1e-5)


def test_a_sweep_plot_marks_diverged_points(tmp_path):
    from clbench._tools.plots import sweep_diverged, sweep_plots

    results = [_cell(f"ewc@lambda={v}", s, 80.0 - v / 10) for v in (3, 10, 30) for s in range(2)]
    results += [_cell("ewc@lambda=100", 0, None, "diverged"), _cell("ewc@lambda=100", 1, 40.0)]
    assert sweep_diverged(results, "s") == {("ewc", "lambda", ""): {100.0: 1}}
    [path] = sweep_plots(results, tmp_path, "p")
    assert path.name == "p-s-ewc-lambda.png" and path.stat().st_size > 0
