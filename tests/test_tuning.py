"""The quick presets are what the validation protocol of scripts/tune_quick.py selects (docs/tuning.md), and each
survives twice its learning rate and strength on every seed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from clbench import testing

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "tune_quick.py"


@pytest.fixture(scope="module")
def tq():
    spec = importlib.util.spec_from_file_location("tune_quick", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tune_quick", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_every_quick_preset_is_the_committed_choice_and_survives_doubling(tq):
    regs = testing.registry()
    cells = tq.planned(regs)
    assert {s for s, _, _ in cells} == set(tq.STREAMS)
    assert tq.check(regs, cells) == []


def test_the_doubled_runs_are_twice_the_preset(tq):
    """Read back from the committed results, not from the script's own matching: each preset's doubled cells
    record twice its learning rate and strength, and all three seeds completed."""
    regs = testing.registry()
    stable = tq._results(tq.STABLE_DIR)
    for stream, method, cell in tq.planned(regs):
        lr, strength = tq.preset_point(cell)
        k = tq.knobs(stream, method)
        scope, name = k.lr_key.split(".", 1)
        found = []
        for r in stable:
            if r.stream != stream or r.method != method:
                continue
            got_lr = r.config["train"][name] if scope == "train" else r.config["methods"][method][name]
            got_s = (r.config["methods"][method][k.strength_key.split(".", 1)[1]] if strength is not None
                     else None)
            if got_lr == pytest.approx(2 * lr) and (strength is None or got_s == pytest.approx(2 * strength)):
                found.append((r.seed, r.status))
        assert sorted(found) == [(s, "complete") for s in tq.SEEDS], (stream, method, found)


def test_selection_skips_unstable_points_and_passed_over_choices(tq):
    P = tq.Point
    a = P(0.05, 10.0, [90.0, 91.0, 92.0], ["complete"] * 3)  # best mean, but its doubled run diverged
    b = P(0.025, 10.0, [95.0, 95.0], ["complete", "complete", "diverged"])  # one seed diverged: out
    c = P(0.025, 100.0, [80.0, 81.0, 82.0], ["complete"] * 3)
    d = P(0.0125, 100.0, [70.0, 71.0, 72.0], ["complete"] * 3)
    grid = [b, a, c, d]  # as grid_points sorts them: by mean (b's two seeds average highest)
    chosen, passed = tq.choose(grid, {(0.05, 10.0): False, (0.025, 100.0): True})
    assert chosen is c and passed == [a]
    chosen, passed = tq.choose(grid, {(0.05, 10.0): None})  # a's doubled run not committed yet: a, to be run
    assert chosen is a and passed == []
    assert tq.choose([b], {}) == (None, [])
