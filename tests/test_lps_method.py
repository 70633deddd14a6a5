"""LPS: the share-mask gradient against autograd, the ADMM Z/U and Y/K updates, the final projection
(exactly β of the old entries), task-aware evaluation with the share mask, resume, bad settings, and the
released code's optimizer handling (learning-rate milestones, one optimizer across ρ stages)."""

from __future__ import annotations

import contextlib
import math
import re

import pytest
import torch
import torch.nn.functional as F
from clbench_plugins._shared.partition import keep_mask
from clbench_plugins.lps.config import LPSConfig
from clbench_plugins.lps.method import LPS
from test_packnet_method import make_cell, run_task  # tests/ is on sys.path (rootdir conftest)
from torch.optim.optimizer import register_optimizer_step_post_hook

from clbench import testing
from clbench._cli.main import main
from clbench._core.results import iter_results, read_result
from clbench._tools import plots
from clbench.cell import CellResult
from clbench.config import TrainConfig
from clbench.data import Batch
from clbench.errors import ConfigError
from clbench.method import Phase

pytestmark = pytest.mark.usefixtures("one_thread")


CFG = LPSConfig(alpha=(0.3,), beta=(0.6,), warmup_epochs=1, admm_epochs=2, rho_stages=2, retrain_epochs=1,
                rho=0.5)


def _second_task_in_admm(cfg: LPSConfig = CFG):
    method, model, ctx = make_cell(LPS, cfg)
    run_task(method, model, ctx, 0)
    method.before_task("t1", 1)
    phase = Phase("admm1", 1, 0.01)
    method.before_phase(phase, "t1", 1)
    return method, model, ctx, phase


def test_phases_follow_the_paper_warmup_rho_stages_retrain():
    method, _, _ = make_cell(LPS, LPSConfig(alpha=(0.3,), warmup_epochs=30, admm_epochs=90, retrain_epochs=30))
    phases = method.phases("t0", 0)
    assert [(p.name, p.epochs) for p in phases] == [("warmup", 30), ("admm1", 30), ("admm2", 30), ("admm3", 30),
                                                     ("retrain", 30)]
    method.before_task("t0", 0)
    for stage, rho in ((1, 1e-3), (3, 1e-1)):
        method.before_phase(Phase(f"admm{stage}", 1, 0.01), "t0", 0)
        assert method.rho == pytest.approx(rho)  # ρ = 1e-3, ×10 per stage (§V-A)


def test_share_mask_gradient_matches_autograd_of_eq4():
    method, model, ctx, phase = _second_task_in_admm()
    x, y = ctx.data("t1").train.x[:16], ctx.data("t1").train.y[:16]
    with torch.no_grad():  # move M off 1 so the test is not degenerate
        for m in method.M.values():
            m.uniform_(0.2, 1.0)
    method.after_step()  # the layer's old entries follow M ⊙ W̄
    # oracle: functional network with weights W_free + M ⊙ W̄ (eq. 4), loss incl. both ADMM penalties
    Ms = {n: m.detach().clone().requires_grad_() for n, m in method.M.items()}
    free_w = {n: (p.detach() * method.free(n)) for n, p in method.layers.items()}
    weights = {n: free_w[n] + Ms[n] * method.w_old[n] for n in method.layers}
    logits = torch.func.functional_call(model, weights, (x, "t1"))
    loss = F.cross_entropy(logits, y)
    loss = loss + 0.5 * method.rho * sum((((Ms[n] - method.Y[n] + method.K[n]) * method.old(n)) ** 2).sum()
                                         for n in Ms)
    loss.backward()
    # the method's path
    model.zero_grad()
    for m in method.M.values():
        m.grad = None
    out = model(x, "t1")
    total = F.cross_entropy(out, y) + sum(method.loss_terms(Batch(x, y, "t1"), out).values())
    total.backward()
    method.after_backward()
    for n, m in method.M.items():
        assert torch.allclose(m.grad, Ms[n].grad, atol=1e-6), n
        g = method.layers[n].grad
        assert (g[~method.free(n)] == 0).all() and (g[method.free(n)] != 0).any()


def test_admm_updates_z_u_y_k():
    method, model, ctx, phase = _second_task_in_admm()
    with torch.no_grad():
        for n, p in method.layers.items():
            p.add_(0.01 * torch.randn_like(p) * method.free(n))
            method.M[n].uniform_(0.0, 1.0)
            method.U[n] = 0.01 * torch.randn_like(p) * method.free(n)
    U0 = {n: u.clone() for n, u in method.U.items()}
    K0 = {n: k.clone() for n, k in method.K.items()}
    method.after_epoch(phase, 0)
    for n, p in method.layers.items():
        w = p.detach() * method.free(n)
        v = w + U0[n]
        z = v * keep_mask(v, method.free(n), method.count(n, 1), "irregular")
        assert torch.equal(method.Z[n], z)
        assert torch.allclose(method.U[n], U0[n] + w - z, atol=1e-6)
        old = method.old(n)
        assert int(method.Y[n].sum()) == round(0.6 * int(old.sum())) and not method.Y[n][~old].any()
        scores = (method.M[n].detach() + K0[n])[old]
        assert scores[method.Y[n][old].bool()].min() >= scores[~method.Y[n][old].bool()].max()
        assert torch.allclose(method.K[n], K0[n] + method.M[n].detach() - method.Y[n], atol=1e-6)


def test_final_projection_share_mask_and_task_aware_weights():
    method, model, ctx = make_cell(LPS, CFG)
    for i in range(2):
        run_task(method, model, ctx, i)
    full = {n: p.detach().clone() for n, p in method.layers.items()}
    for n in method.layers:
        old_at_1 = method.owner[n] == 1
        share = method.shares[1][n]
        assert int(share.sum()) == round(0.6 * int(old_at_1.sum())) and not (share & ~old_at_1).any()
    with method.evaluating("t1"):
        for n, p in method.layers.items():
            assert torch.equal(p.detach(), full[n] * ((method.owner[n] == 2) | method.shares[1][n]))
    with method.evaluating("t0"):
        for n, p in method.layers.items():
            assert torch.equal(p.detach(), full[n] * (method.owner[n] == 1))
    for n, p in method.layers.items():
        assert torch.equal(p.detach(), full[n])
    report = method.report()
    assert report["share_ratio"] == pytest.approx(0.6, abs=0.01)
    state = method.state_dict()
    bits = next(iter(state["shares"]["1"].values()))
    assert bits.dtype == torch.uint8  # bit-packed, not float masks
    fresh, _, _ = make_cell(LPS, CFG)
    fresh.load_state_dict(state)
    assert all(torch.equal(fresh.shares[1][n], method.shares[1][n]) for n in method.layers)


def test_runs_resumes_acr_zero_and_reports_share(tmp_path):
    regs = testing.registry()
    result = testing.check_method(regs, "lps", tmp_path)  # kills after task 1, resumes, compares matrices
    assert result.metrics["ACR"] == 0.0 and result.metrics["F.Ra"] == 0.0
    assert result.metrics["Share"] == pytest.approx(0.9, abs=0.02)
    assert result.report["capacity_used"] == pytest.approx(0.2, abs=0.02)


@pytest.mark.parametrize(("changes", "needle"), [
    ({"beta": (0.0,)}, "lps.beta=0.0"),
    ({"beta": (1.2,)}, "lps.beta=1.2"),
    ({"beta": (0.5, -0.1)}, "lps.beta=-0.1"),
    ({"alpha": (2.0,)}, "lps.alpha=2.0"),
    ({"alpha": (0.0,)}, "lps.alpha=0.0"),
    ({"alpha_first": 1.5}, "lps.alpha_first=1.5"),
    ({"projection": ("diagonal",)}, "lps.projection='diagonal'"),
    ({"admm_epochs": 2, "rho_stages": 3}, "lps.rho_stages"),
    ({"rho": 0.0}, "lps.rho=0.0"),
    ({"lr_milestones": (3, 1)}, "lps.lr_milestones=[3, 1]"),
    ({"lr_milestones": (0, 2)}, "lps.lr_milestones=[0, 2]"),
    ({"lr_milestones": (2, 2)}, "lps.lr_milestones=[2, 2]"),
    ({"lr_gamma": 0.0}, "lps.lr_gamma=0.0"),
])
def test_out_of_range_settings_fail_when_the_config_is_built(changes, needle):
    """Plan time: the planner builds every cell's config before the first cell runs."""
    with pytest.raises(ConfigError, match=re.escape(needle)):
        LPSConfig(**{**CFG.__dict__, **changes})


@pytest.mark.parametrize(("changes", "needle"), [
    ({"alpha": (0.7,)}, "lps.alpha: capacity overrun"),  # 2 tasks × 70% of each layer
    ({"alpha": (0.3,), "alpha_first": 0.8}, "lps.alpha: capacity overrun"),
    ({"projection": ("filter",)}, "lps.projection='filter' does not fit"),  # the MLP has Linear layers only
    ({"beta": (0.5, 0.5, 0.5, 0.5)}, "lps.beta: give one value or one per pruned layer"),
])
def test_settings_that_need_the_model_fail_in_setup(changes, needle):
    cfg = LPSConfig(**{**CFG.__dict__, **changes})
    with pytest.raises(ConfigError, match=re.escape(needle)):
        make_cell(LPS, cfg)


def test_cli_bad_beta_is_one_error_before_any_cell(capsys, tmp_path):
    code, err = _cli(capsys, "--methods", "lps", "--stream", "split-digits", "--set", "lps.beta=0.5,1.5",
                     "--out", str(tmp_path / "runs"))
    assert code == 2 and "lps.beta=1.5 must lie in (0, 1]" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # nothing planned, nothing trained


def test_cli_capacity_overrun_fails_before_training(capsys, tmp_path):
    """5 tasks × α = 0.3 > the layer: the cell stops in setup (no task trained), naming the setting; a failed cell exits 1."""
    out = tmp_path / "runs"
    code, err = _cli(capsys, "--methods", "lps", "--stream", "split-digits", "--orders", "1", "--seeds", "0",
                     "--set", "lps.alpha=0.3", "--fail-fast", "--out", str(out))
    assert code == 1 and "lps.alpha: capacity overrun" in err and "Traceback" not in err
    result = read_result(next(out.rglob("result.json")))
    assert result.status == "failed" and "capacity overrun" in result.error
    assert result.timings["tasks"] == [] and all(v is None for row in result.accuracy_matrix for v in row)


def _cli(capsys, *args):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--no-progress", "--no-leaderboard", *args])
        raise SystemExit(0)
    return exit_.value.code or 0, capsys.readouterr().err


# --------------------------------------------------------------------------- β sweep: table and plot
def _fake(method, seed, aa, status="complete", stream="split-digits"):
    return CellResult(method=method, stream=stream, order="1", seed=seed, tasks=["a", "b"],
                      accuracy_matrix=[[aa, 0.0], [aa, aa]], status=status, metrics={"AA": aa} if status == "complete" else {},
                      config={"profile": "quick"})


def test_sweep_series_groups_numeric_sweep_labels_by_value():
    results = [_fake("lps@beta=0.5", 0, 80.0), _fake("lps@beta=0.5", 1, 82.0), _fake("lps@beta=0.7", 0, 85.0),
               _fake("lps@beta=0.9", 0, 90.0), _fake("lps@beta=0.9", 1, 10.0, status="failed"),
               _fake("packnet", 0, 70.0), _fake("lps@projection=column", 0, 60.0),  # not numeric: no line
               _fake("lps@beta=0.5", 0, 1.0, stream="permuted-digits")]
    assert plots.sweep_label("lps@beta=0.5") == ("lps", {"beta": "0.5"})
    assert plots.sweep_label("lps") is None
    series = plots.sweep_series(results, "split-digits")
    assert series == {("lps", "beta", ""): [(0.5, [80.0, 82.0]), (0.7, [85.0]), (0.9, [90.0])]}
    two_keys = [_fake(f"lps@alpha={a},beta={b}", 0, 10 * a + b) for a in (0.1, 0.2) for b in (0.5, 0.9)]
    got = plots.sweep_series(two_keys, "split-digits")
    assert got[("lps", "beta", "alpha=0.1")] == [(0.5, [1.5]), (0.9, [1.9])]
    assert got[("lps", "alpha", "beta=0.9")] == [(0.1, [1.9]), (0.2, [2.9])]


@pytest.mark.slow
def test_beta_sweep_renders_its_own_rows_and_an_aa_against_beta_plot(capsys, tmp_path):
    """`--set lps.beta=0.5,0.9` → cells labelled lps@beta=…; the leaderboard shows one row per β (their
    own table when the sweep has its own --out) and `clbench leaderboard` draws AA against β."""
    runs, board = tmp_path / "runs", tmp_path / "board"
    code, err = _cli(capsys, "--methods", "lps", "--stream", "split-digits", "--orders", "1", "--seeds", "0",
                     "--set", "lps.beta=0.5,0.9", "--set", "lps.warmup_epochs=1", "--set", "lps.admm_epochs=3",
                     "--set", "lps.retrain_epochs=1", "--out", str(runs))
    assert code == 0, err
    results = {r.method: r for r in iter_results(runs)}
    assert set(results) == {"lps@beta=0.5", "lps@beta=0.9"}
    assert results["lps@beta=0.5"].metrics["Share"] == pytest.approx(0.5, abs=0.01)
    with pytest.raises(SystemExit) as exit_:
        main(["leaderboard", str(runs), "--out", str(board)])
        raise SystemExit(0)
    assert (exit_.value.code or 0) == 0
    text = (board / "quick.md").read_text(encoding="utf-8")
    aa = text.split("#### AA")[1].split("####")[0]
    rows = [line for line in aa.splitlines() if line.startswith("| lps@")]
    assert [r.split("|")[1].strip() for r in rows] == ["lps@beta=0.5", "lps@beta=0.9"]
    for row in rows:
        label = row.split("|")[1].strip()
        assert f"{results[label].metrics['AA']:.2f}" in row
    png = board / "plots" / "quick-split-digits-lps-beta.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = plots.sweep_plots(list(iter_results(runs)), tmp_path / "again", "quick")
    assert [p.name for p in again] == [png.name] and again[0].read_bytes() == png.read_bytes()  # deterministic


# --------------------------------------------------------------------------- the released code's optimizer handling
ADAM = TrainConfig(epochs=1, batch_size=16, lr=0.01, optimizer="adam")


class _Spy(LPS):
    """Records the phase it is in; with :func:`_recording`, the learning rate of every optimizer step per epoch."""

    def setup(self, model):
        super().setup(model)
        self.phase_name = ""
        self.lrs: dict[str, list[list[float]]] = {}

    def before_phase(self, phase, task, index):
        super().before_phase(phase, task, index)
        self.phase_name = phase.name
        self.lrs[f"{index}:{phase.name}"] = [[]]

    def after_epoch(self, phase, epoch):
        super().after_epoch(phase, epoch)
        self.lrs[f"{self.index}:{phase.name}"].append([])


@contextlib.contextmanager
def _recording(method: _Spy):
    """Every optimizer step's rate (the runner's optimizer, as it steps) into the spy's current epoch."""
    def hook(opt, args, kwargs):
        method.lrs[f"{method.index}:{method.phase_name}"][-1].append(opt.param_groups[0]["lr"])

    handle = register_optimizer_step_post_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _batches(ctx, task: str) -> int:
    return math.ceil(len(ctx.data(task).train) / ADAM.batch_size)


def test_lr_milestones_halve_the_rate_of_warmup_and_retrain_only():
    """Milestones 1, 3, 5, 65 over 5-epoch phases: ×0.5 after epochs 1 and 3; 5 and 65 never fire."""
    cfg = LPSConfig(**{**CFG.__dict__, "warmup_epochs": 5, "retrain_epochs": 5, "lr_milestones": (1, 3, 5, 65)})
    method, model, ctx = make_cell(_Spy, cfg, train=ADAM)
    with _recording(method):
        for i in range(2):
            run_task(method, model, ctx, i)
    per_epoch = [0.01, 0.005, 0.005, 0.0025, 0.0025]  # by hand: 0.01 × 0.5^(milestones passed)
    n = _batches(ctx, "t0")
    for key in ("0:warmup", "0:retrain", "1:warmup", "1:retrain"):
        got = method.lrs[key][:-1]  # the last list is opened by the last epoch's end
        assert got == [[lr] * n for lr in per_epoch], key
    # ADMM stages keep a constant rate (the code's admm_adjust_learning_rate at interval 1)
    admm = [lr for k, lrs in method.lrs.items() if "admm" in k for epoch in lrs for lr in epoch]
    assert len(admm) == 2 * CFG.admm_epochs * n and set(admm) == {0.01}


def _weights_after_two_tasks(cfg: LPSConfig) -> dict[str, torch.Tensor]:
    method, model, ctx = make_cell(LPS, cfg, train=ADAM)
    for i in range(2):
        run_task(method, model, ctx, i)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_settings_that_change_no_step_leave_the_weights_bit_equal():
    """Milestones that never fire, and one optimizer group over a single ρ stage, change no number."""
    base = LPSConfig(**{**CFG.__dict__, "admm_epochs": 1, "rho_stages": 1})
    want = _weights_after_two_tasks(base)
    for changes in ({"lr_milestones": (65,)}, {"optimizer_across_stages": True}):
        got = _weights_after_two_tasks(LPSConfig(**{**base.__dict__, **changes}))
        assert all(torch.equal(got[n], want[n]) for n in want), changes


def _admm_adam_steps(across: bool) -> tuple[list[tuple[str, int, float]], int]:
    """(ρ stage, optimizer id, Adam step count after the step) for every weight-moving step of task 2's ADMM."""
    cfg = LPSConfig(**{**CFG.__dict__, "admm_epochs": 2, "rho_stages": 2, "optimizer_across_stages": across})
    method, model, ctx = make_cell(_Spy, cfg, train=ADAM)
    run_task(method, model, ctx, 0)
    seen: list[tuple[str, int, float]] = []

    def hook(opt, args, kwargs):
        if method.phase_name.startswith("admm"):
            seen.append((method.phase_name, id(opt), max(float(s["step"]) for s in opt.state.values())))

    handle = register_optimizer_step_post_hook(hook)
    try:
        run_task(method, model, ctx, 1)
    finally:
        handle.remove()
    return seen, _batches(ctx, "t1")


def test_one_optimizer_across_rho_stages_keeps_adams_state():
    seen, n = _admm_adam_steps(across=True)
    assert [s[0] for s in seen] == ["admm1"] * n + ["admm2"] * n
    assert len({s[1] for s in seen}) == 1  # one optimizer for both stages
    assert [s[2] for s in seen] == list(range(1, 2 * n + 1))  # its step count runs on: moments carried over


def test_by_default_each_rho_stage_starts_a_fresh_optimizer():
    seen, n = _admm_adam_steps(across=False)
    assert [s[0] for s in seen] == ["admm1"] * n + ["admm2"] * n
    assert seen[0][1] != seen[n][1]  # another optimizer object
    assert [s[2] for s in seen] == list(range(1, n + 1)) * 2  # Adam's state starts empty again


def test_cli_settings_reach_the_cell_and_its_result(capsys, tmp_path):
    """`--set lps.lr_milestones=[1] --set lps.optimizer_across_stages=true` runs end to end and is recorded."""
    code, err = _cli(capsys, "--methods", "lps", "--stream", "split-digits", "--orders", "1", "--seeds", "0",
                     "--set", "lps.lr_milestones=[1]", "--set", "lps.optimizer_across_stages=true",
                     "--set", "lps.warmup_epochs=2", "--set", "lps.admm_epochs=2", "--set", "lps.rho_stages=2",
                     "--set", "lps.retrain_epochs=2", "--out", str(tmp_path / "runs"))
    assert code == 0, err
    [result] = list(iter_results(tmp_path / "runs"))
    assert result.status == "complete" and result.metrics["F.Ra"] == 0.0
    lps = result.config["methods"]["lps"]
    assert lps["lr_milestones"] == [1] and lps["optimizer_across_stages"] is True


@pytest.mark.parametrize("stream", ["permuted-mnist", "split-cifar10-100"])
def test_paper_lps_takes_the_released_schedule_and_a_fresh_optimizer_per_stage(stream, tmp_path):
    from clbench._core.plan import RunRequest, make_plan
    from clbench._exec.local import harness_registry

    req = RunRequest(profile="paper-lps", methods="lps", streams=[stream], seeds=[0], orders=None, sets={},
                     out=tmp_path)
    [cell] = make_plan(harness_registry(), req).cells
    lps = cell.method_config["lps"]
    assert lps["lr_milestones"] == [65, 100, 130, 190, 220, 250, 280] and lps["lr_gamma"] == 0.5
    assert lps["optimizer_across_stages"] is False
    assert LPSConfig().lr_milestones == () and LPSConfig().optimizer_across_stages is False  # the paper: silent


# --------------------------------------------------------------------------- scripts/lps_schedule_table.py
def _table_script():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "lps_schedule_table.py"
    spec = importlib.util.spec_from_file_location("lps_schedule_table", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_schedule_table_in_the_docs_is_what_the_committed_cells_give():
    script = _table_script()
    assert script.main(["--check"]) == 0  # exit 1 would mean: docs/lps-packnet.md is stale
    body = script.render(script.RESULTS)
    aa = [r.metrics["AA"] for r in iter_results(script.RESULTS)
          if r.config["methods"]["lps"]["lr_milestones"] == [] and not r.config["methods"]["lps"]["optimizer_across_stages"]]
    mean = sum(aa) / len(aa)
    assert len(aa) == 3 and f"| {mean:.2f} ± " in body  # (a)'s mean, computed here without statistics


def test_schedule_table_refuses_a_document_without_its_markers():
    script = _table_script()
    with pytest.raises(script.TableError, match="needs exactly one"):
        script.replace_section("# no markers\n", "| x |")
    text = f"a\n{script.BEGIN}\nold\n{script.END}\nb\n"
    assert script.replace_section(text, "new\n") == f"a\n{script.BEGIN}\nnew\n{script.END}\nb\n"
