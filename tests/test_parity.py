"""Paper parity: the verdict rule against intervals computed with scipy directly, a profile's rows as each cell's
settings (the DER paper's best_args), and the leaderboard's parity section."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest
from scipy import stats

from clbench import testing
from clbench._core.plan import RunRequest, make_plan
from clbench._tools.parity import Target, judge, parity, section, verdict
from clbench.errors import ConfigError

PAPER = Target("seq-mnist", "der", 84.55, 1.64, "Table 2", "mean confirmed")


def _interval(values, paper):
    d = [v - paper for v in values]
    half = stats.t.ppf(0.975, len(d) - 1) * statistics.stdev(d) / len(d) ** 0.5
    return statistics.fmean(d) - half, statistics.fmean(d) + half


@pytest.mark.parametrize(
    "values,expected",
    [
        ([84.0, 85.1, 84.4, 85.6, 84.2], "reproduces"),  # interval ≈ (−0.7, +0.7) inside ±3.28
        ([71.2, 70.4, 72.9, 71.8, 70.9], "below"),  # the masked-head DER of issue 50
        ([88.5, 90.1, 89.0, 88.2, 89.9], "above"),
        ([86.5, 89.5, 84.0, 90.5, 85.0], "not resolved"),  # the interval straddles +τ
    ],
)
def test_the_rule_judges_the_interval_of_the_difference_against_tau(values, expected):
    row = judge(PAPER, values)
    lo, hi = _interval(values, PAPER.mean)
    assert row.interval == pytest.approx((lo, hi))
    assert row.tau == pytest.approx(2 * 1.64)
    assert row.verdict == expected


def test_tau_has_a_two_point_floor_and_falls_back_to_clbenchs_own_spread():
    assert judge(Target("s", "m", 19.6, 0.04, "", ""), [19.5, 19.7, 19.6]).tau == 2.0
    values = [60.0, 64.0, 62.0, 66.0]
    assert judge(Target("s", "m", 62.0, None, "", ""), values).tau == pytest.approx(2 * statistics.stdev(values))
    one = judge(Target("s", "m", 62.0, None, "", ""), [61.0])
    assert (one.interval, one.tau, one.verdict) == (None, None, "not resolved")
    assert verdict((-1.0, 1.0), 1.0) == "reproduces" and verdict((-1.0, 1.01), 1.0) == "not resolved"


def test_parity_matches_targets_to_complete_cells_and_the_section_names_what_is_not_implemented():
    spec = {"paper": "P", "table": "T", "rows": [vars(PAPER) | {"confirmed": "c"}],
            "not_implemented": [{"stream": "seq-mnist", "method": "HAL", "mean": 84.7}]}
    cells = [SimpleNamespace(stream="seq-mnist", method="der", status="complete", metrics={"AA": v})
             for v in (84.0, 85.1, 84.4)]
    cells += [SimpleNamespace(stream="seq-mnist", method="der", status="diverged", metrics={"AA": 10.0}),
              SimpleNamespace(stream="perm-mnist", method="der", status="complete", metrics={"AA": 10.0})]
    [row] = parity(cells, spec)
    assert row.values == (84.0, 85.1, 84.4)
    text = section(cells, spec)
    assert "| seq-mnist | der | 84.55 ± 1.64 |" in text and "HAL (seq-mnist)" in text


def _cell(profile, stream, method, sets=None):
    [cell] = make_plan(testing.registry(), RunRequest(methods=method, streams=[stream], profile=profile, seeds=[0],
                                                      out="unused", sets=sets or {})).cells
    return cell


def test_a_profiles_rows_are_each_methods_settings_from_the_papers_code():
    """Mammoth's best_args (utils/best_args.py at neurips2020) as each cell's settings."""
    der = _cell("paper-der", "seq-mnist", "der")
    assert (der.train.lr, der.train.batch_size, der.train.head, der.train.init) == (0.03, 10, "full", "xavier")
    assert (der.methods_cfg["der"].alpha, der.methods_cfg["der"].replay_batch_size) == (0.2, 10)
    der500 = _cell("paper-der-500", "seq-mnist", "der")
    assert (der500.methods_cfg["der"].buffer_size, der500.methods_cfg["der"].alpha) == (500, 1.0)
    assert der500.methods_cfg["der"].replay_batch_size == 128
    gem = _cell("paper-der", "perm-mnist", "gem")  # 200 // 20 tasks
    assert (gem.methods_cfg["gem"].memory_per_task, gem.methods_cfg["gem"].margin, gem.train.lr) == (10, 0.5, 0.1)
    ewc = _cell("paper-der", "seq-mnist", "ewc")  # e_lambda 90 in CE + λΣF(Δ)²: clbench's (λ/2)ΣF(Δ)² takes 180
    assert ewc.methods_cfg["ewc"].lambda_ == 180
    assert _cell("paper-der", "seq-mnist", "icarl").train.head == "masked"
    til = _cell("paper-der", "seq-mnist-til", "replay")
    assert til.train.scoring == "task" and til.methods_cfg["replay"].fill == "during"
    assert _cell("paper-der", "seq-mnist", "der", {"der.alpha": [0.5]}).methods_cfg["der"].alpha == 0.5  # --set wins


def test_a_row_key_no_setting_reads_is_refused(tmp_path):
    from clbench import hookimpl
    from clbench.specs import ProfileSpec

    class Rows:
        @hookimpl
        def clbench_add_profiles(self):
            return [ProfileSpec("rows-test", streams=("seq-mnist",), rows={"seq-mnist": {"seqft": {"der.alpha": 1}}})]

    with pytest.raises(ConfigError, match="its row 'seqft' on stream 'seq-mnist' sets der.alpha"):
        make_plan(testing.registry(Rows()), RunRequest(methods="seqft", streams=["seq-mnist"], profile="rows-test",
                                                       out=tmp_path, model="mlp"))


def test_every_table_names_the_protocol_conventions_its_cells_ran_under():
    from clbench._tools.leaderboard import _protocol_line

    def cell(method, head):
        return SimpleNamespace(method=method, config={"train": {"head": head, "init": "xavier"}})

    line = _protocol_line([cell("der", "full"), cell("icarl", "masked"), cell("lwf", "masked")], "class-incremental")
    assert "`train.head`: full (der); masked (icarl, lwf)" in line
    assert "`train.scoring=stream`" in line and "`train.init=xavier`" in line
    assert "train.head" not in _protocol_line([cell("der", "masked")], "domain-incremental")  # no growing head


def _targets_plugin(profile: str, rows: list[dict]):
    from clbench import hookimpl
    from clbench.specs import TargetsSpec

    class Targets:
        @hookimpl
        def clbench_add_targets(self):
            return [TargetsSpec(profile, {"paper": "P", "table": "T", "rows": rows})]

    return Targets()


def test_a_plugin_s_targets_become_another_plugin_s_profile_s():
    row = {"stream": "seq-mnist", "method": "der", "mean": 80.0, "sd": None}
    regs = testing.registry(_targets_plugin("quick", [row]))
    assert regs.profiles.get("quick").targets["rows"] == [row]
    assert regs.profiles.get("quick").seeds == testing.registry().profiles.get("quick").seeds  # the rest unchanged
    assert regs.targets.origins["quick"].plugin != regs.profiles.origins["quick"].plugin


@pytest.mark.parametrize(("profile", "message"), [
    ("paper-der", r"profile 'paper-der' has targets of its own .* and from plugin .*: give them in one place"),
    ("paper-dre", r"gives targets for profile 'paper-dre', which no plugin registers — did you mean 'paper-der'\?"),
])
def test_targets_for_a_profile_with_its_own_or_for_none_are_refused(profile, message):
    from clbench.errors import PluginError

    with pytest.raises(PluginError, match=message):
        testing.registry(_targets_plugin(profile, []))


def test_paper_lps_targets_are_table_ii_rows_clbench_can_run():
    """Every target of paper-lps names a stream and a method registered here, in the profile, with the paper's
    column order; the split-RF row (no such stream) is listed as not implemented."""
    regs = testing.registry()
    profile = regs.profiles.get("paper-lps")
    rows = profile.targets["rows"]
    assert [(r["stream"], r["method"]) for r in rows] == [
        (s, m) for s in ("permuted-mnist", "split-cifar10-100")
        for m in ("sm", "ewc", "si", "lwf", "dgr", "gem", "packnet", "lps")]
    assert all(r["stream"] in profile.streams and r["method"] in profile.methods for r in rows)
    assert all(r["method"] in regs.methods and r["stream"] in regs.streams for r in rows)
    assert {(r["stream"], r["method"]): r["mean"] for r in rows}[("permuted-mnist", "lps")] == 98.58
    assert {n["stream"] for n in profile.targets["not_implemented"]} == {"split-rf"}
    assert "split-rf" not in regs.streams
