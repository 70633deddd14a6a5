"""`clbench tune`: the search draws the same configurations for every method, runs only on tuning seeds and a held-out
order, chooses the same point twice, and the committed quick presets are what the committed tuning results choose."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from clbench import testing
from clbench._core.plan import RunRequest, make_plan
from clbench._core.results import iter_results
from clbench._tools import fragility as F
from clbench._tools import tune as T
from clbench.cell import TEST_PROFILE
from clbench.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def regs():
    return testing.registry()


def _tune(regs, out: Path):
    return T.tune(regs, TEST_PROFILE, out, streams=["tiny-vector"], methods="seqft,ewc", trials=4, extensions=1,
                  offset=1000, options={"jobs": 1}, progress=False)


@pytest.fixture(scope="module")
def tuned(regs, tmp_path_factory):
    out = tmp_path_factory.mktemp("tune")
    pairs, left = _tune(regs, out)
    return out, pairs, left


def test_sobol_draws_fill_each_interval_of_the_log_range_once():
    space = T.Space(("train.lr",), ((1e-3, 1e-1),))
    points = T.draw(space, space.ranges, 8, "s/m/0")
    assert points == T.draw(space, space.ranges, 8, "s/m/0")  # seeded
    assert points != T.draw(space, space.ranges, 8, "s/m/1")
    # a (0, 3, 1)-net in base 2: one point in each eighth of the log range (up to the 3-digit rounding)
    us = sorted((math.log10(p["train.lr"]) + 3) / 2 for p in points)
    assert [min(7, int(u * 8 + 1e-3)) for u in us] == list(range(8))
    assert all(p["train.lr"] == float(f"{p['train.lr']:.3g}") for p in points)
    with pytest.raises(ConfigError, match="power of two"):
        T.draw(space, space.ranges, 6, "x")


def test_an_edge_choice_moves_the_range_half_its_width_past_the_edge():
    space = T.Space(("train.lr", "ewc.lambda"), ((0.01, 1.0), (1.0, 1e4)))
    pair = T.Pair("s", "ewc", None, space, "2", [1000], [0], ["1"], rounds=[list(space.ranges)])  # type: ignore[arg-type]
    # lr 0.0105 sits at u = 0.0106 of two decades (low edge); λ = 100 in the middle
    trial = T.Trial({"train.lr": 0.0105, "ewc.lambda": 100.0})
    assert pair.edges(trial) == {"train.lr": -1}
    lo, hi = pair.extended({"train.lr": -1})[0]
    assert (lo, hi) == pytest.approx((0.001, 0.01))  # one decade (half of two) below 0.01
    assert pair.extended({"train.lr": -1})[1] == (1.0, 1e4)
    assert pair.variants(trial) == {
        "lr×0.5": {"train.lr": 0.00525, "ewc.lambda": 100.0},
        "lr×2": {"train.lr": 0.021, "ewc.lambda": 100.0},
        "strength×0.5": {"train.lr": 0.0105, "ewc.lambda": 50.0},
        "strength×2": {"train.lr": 0.0105, "ewc.lambda": 200.0},
    }


def test_zipped_points_plan_one_cell_a_point(regs, tmp_path):
    points = [{"train.lr": 0.01, "ewc.lambda": 10.0}, {"train.lr": 0.02, "ewc.lambda": 1.0}]
    req = RunRequest(profile=TEST_PROFILE, methods="ewc", streams=["tiny-vector"], points=points, out=tmp_path)
    cells = make_plan(regs, req).cells
    assert [c.sweep for c in cells] == points  # two cells, not the four of a grid
    assert [(c.train.lr, c.methods_cfg["ewc"].lambda_) for c in cells] == [(0.01, 10.0), (0.02, 1.0)]
    with pytest.raises(ConfigError, match="same keys"):
        make_plan(regs, RunRequest(profile=TEST_PROFILE, methods="ewc", streams=["tiny-vector"], out=tmp_path,
                                   points=[{"train.lr": 0.01}, {"ewc.lambda": 1.0}]))
    with pytest.raises(ConfigError, match="stream settings"):
        make_plan(regs, RunRequest(profile=TEST_PROFILE, methods="ewc", streams=["tiny-vector"], out=tmp_path,
                                   points=[{"stream.x": 1}]))


def test_tuning_runs_only_tuning_seeds_on_a_held_out_order(tuned):
    out, pairs, left = tuned
    assert left == 0
    results = list(iter_results(out))
    assert results and {r.seed for r in results} == {1000}  # the test profile reports seed 0
    assert {r.order for r in results} == {"2"}  # it reports order 1
    assert {r.config["train"]["eval_split"] for r in results} == {"val"}
    assert not list(out.rglob("footprints.safetensors"))  # result.json only: nothing reads a tuning cell's footprints
    for pair in pairs:
        assert (pair.seeds, pair.reported_seeds, pair.order) == ([1000], [0], "2")


def test_every_method_gets_the_same_configurations_per_setting_searched(tuned):
    """The per-setting rule: 4 configurations a round for SeqFT's lr, 8 for EWC's lr and λ (4 × 2 settings)."""
    out, pairs, _ = tuned
    by = {p.label: p for p in pairs}
    assert set(by) == {"seqft", "ewc"}
    assert [len(by[m].space.keys) for m in ("seqft", "ewc")] == [1, 2]
    for pair in pairs:
        assert len(pair.trials) == 4 * len(pair.space.keys) * len(pair.rounds)
        names = {r.method for r in iter_results(out) if r.method.split("@")[0] == pair.label}
        assert len(names) == len({tuple(t.point.items()) for t in pair.trials} | {
            tuple(t.point.items()) for t in pair.stability.values()})
    assert set(by["seqft"].stability) == {"lr×0.5", "lr×2"}
    assert set(by["ewc"].stability) == {"lr×0.5", "lr×2", "strength×0.5", "strength×2"}


def test_the_rule_scales_the_configurations_by_the_settings_searched():
    one, two, three = (T.Space(("train.lr", "x.a", "x.b")[:n], ((1e-3, 1e-1),) * n) for n in (1, 2, 3))
    assert [T.trials_for(s, 8, "per-setting") for s in (one, two, three)] == [8, 16, 32]  # 24 rounded up to 32
    assert [T.trials_for(s, 8, "flat") for s in (one, two, three)] == [8, 8, 8]
    with pytest.raises(ConfigError, match="one of per-setting, flat"):
        T.trials_for(one, 8, "dense")
    # a flat round is the first points of the per-setting round: widening a tree in place reruns none of its cells
    assert T.draw(two, two.ranges, 16, "s/m/0")[:8] == T.draw(two, two.ranges, 8, "s/m/0")


def test_a_tuning_tree_records_its_search_and_refuses_another(tuned, tmp_path):
    out, _, _ = tuned
    assert json.loads((out / T.SEARCH_FILE).read_text()) == {"trials": 4, "rule": "per-setting"}
    assert T.search_of(out, None, None) == (4, "per-setting")
    with pytest.raises(ConfigError, match="searched with --trials 4 --search per-setting; asked --trials 8"):
        T.search_of(out, 8, None)
    with pytest.raises(ConfigError, match="asked --trials 4 --search flat"):
        T.search_of(out, None, "flat")
    (tmp_path / T.SEARCH_FILE).write_text('{"trials": 8, "rule": "flat"}')
    assert T.search_of(tmp_path, None, "per-setting") == (8, "per-setting")  # widened in place
    assert T.search_of(tmp_path / "new", None, None) == (8, "per-setting")  # a new tree: the default
    (tmp_path / T.SEARCH_FILE).write_text('{"trials": 8}')
    with pytest.raises(ConfigError, match="not a search record"):
        T.search_of(tmp_path, None, None)


def test_a_flat_tree_widened_to_per_setting_runs_only_the_new_points(regs, tmp_path):
    """A flat search's cells are reused by the per-setting search of the same tree: SeqFT (one setting) runs no new
    cell, EWC's first round keeps its 4 flat points as the first 4 of its 8."""
    kw = dict(streams=["tiny-vector"], methods="seqft,ewc", trials=4, extensions=0, offset=1000,
              options={"jobs": 1}, progress=False)
    flat, _ = T.tune(regs, TEST_PROFILE, tmp_path, rule="flat", **kw)
    before = {r.key for r in iter_results(tmp_path)}
    wide, left = T.tune(regs, TEST_PROFILE, tmp_path, rule="per-setting", **kw)
    assert left == 0
    new = {r.key: r for r in iter_results(tmp_path) if r.key not in before}
    by_flat, by_wide = {p.label: p for p in flat}, {p.label: p for p in wide}
    assert [t.point for t in by_wide["seqft"].trials] == [t.point for t in by_flat["seqft"].trials]
    assert [t.point for t in by_wide["ewc"].trials[:4]] == [t.point for t in by_flat["ewc"].trials]
    assert len(by_wide["ewc"].trials) == 8
    assert all(r.method.split("@")[0] == "ewc" for r in new.values())
    assert json.loads((tmp_path / T.SEARCH_FILE).read_text()) == {"trials": 4, "rule": "per-setting"}


def test_the_choice_is_the_best_complete_point_and_repeats(regs, tuned, tmp_path):
    out, pairs, _ = tuned
    for pair in pairs:
        best = pair.best()
        assert best is not None
        complete = [t for t in pair.trials if t.complete(1)]
        assert best.mean == max(t.mean for t in complete)
    again, _ = _tune(regs, tmp_path)
    assert [p.best().point for p in again] == [p.best().point for p in pairs]  # type: ignore[union-attr]


def test_a_choice_no_better_than_seqft_or_with_an_inert_strength_is_flagged():
    """SI's committed quick choice on split-digits-cil: validation AA 18.13 against SeqFT's 17.87 (Δ 2.4), and its
    strength at 0.5× and 2× moving nothing. Built by hand: the flag reads only the trials already there."""
    done = ["complete", "complete"]
    s_space = T.Space(("train.lr",), ((0.005, 0.2),))
    seqft = T.Pair("s", "seqft", None, s_space, "2", [1000, 1001], [0, 1], ["1"], rounds=[list(s_space.ranges)])  # type: ignore[arg-type]
    seqft.trials = [T.Trial({"train.lr": 0.0272}, [17.5, 18.24], done), T.Trial({"train.lr": 0.1}, [9.0, 11.0], done)]
    si_space = T.Space(("train.lr", "si.c"), ((0.005, 0.2), (0.1, 1000.0)))
    si = T.Pair("s", "si", None, si_space, "2", [1000, 1001], [0, 1], ["1"], rounds=[list(si_space.ranges)])  # type: ignore[arg-type]
    chosen = {"train.lr": 0.02, "si.c": 1.0}
    si.trials = [T.Trial(chosen, [17.0, 19.26], done), T.Trial({"train.lr": 0.1, "si.c": 50.0}, [5.0, 6.0], done)]
    si.stability = {name: T.Trial(point, [17.0, 19.26], done) for name, point in si.variants(si.trials[0]).items()}
    si.stability["lr×2"] = T.Trial(si.variants(si.trials[0])["lr×2"], [12.0, 13.0], done)
    floors = T.lower_bounds([seqft, si])
    assert floors == {"s": pytest.approx((17.5 + 18.24) / 2)}  # SeqFT's best, not its other trial
    flagged = T.choice(si, 2.4, floors["s"])
    gap = (17.0 + 19.26) / 2 - (17.5 + 18.24) / 2  # +0.26
    assert flagged.at_lower_bound == [f"within Δ of seqft ({gap:+.2f})", "strength ×0.5 and ×2 move no AA"]
    assert T.choice(si, 0.2, floors["s"]).at_lower_bound == ["strength ×0.5 and ×2 move no AA"]  # 0.26 > Δ = 0.2
    si.stability["strength×2"] = T.Trial(si.variants(si.trials[0])["strength×2"], [20.0, 21.0], done)
    assert T.choice(si, 0.2, floors["s"]).at_lower_bound == []  # the strength acts and beats SeqFT by more than Δ
    assert T.choice(si, 2.4, None).at_lower_bound == []  # no SeqFT tuned on the stream: nothing to compare with
    assert T.choice(seqft, 2.4, floors["s"]).at_lower_bound == []  # the lower bound is not flagged against itself


def test_a_preset_that_is_not_the_choice_is_named(tuned):
    _, pairs, _ = tuned
    choices = [T.choice(p, 1.0) for p in pairs]
    lines = T.preset_mismatches(choices)
    # the test profile trains at lr 0.05 with EWC's default λ; the draws are rounded to 3 digits, never 0.05 exactly
    assert any(line.startswith("tiny-vector/seqft: train.lr is 0.05") for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize(("profile", "tuning_seeds", "streams"), [
    ("quick", None, {"permuted-digits", "permuted-digits-til", "split-digits", "split-digits-cil", "cl-quick"}),
    ("bench", 1, {"permuted-mnist", "permuted-mnist-dil", "split-mnist", "split-mnist-cil"}),
    ("bench-equal-compute", 1, {"permuted-mnist", "permuted-mnist-dil", "split-mnist", "split-mnist-cil"}),
    ("bench-memory-500", 1, {"permuted-mnist", "permuted-mnist-dil", "split-mnist", "split-mnist-cil"}),
    ("bench-memory-200", 1, {"permuted-mnist", "permuted-mnist-dil", "split-mnist", "split-mnist-cil"}),
    ("bench-equal-steps", 1, {"permuted-mnist", "permuted-mnist-dil", "split-mnist", "split-mnist-cil"}),
])
def test_every_preset_is_the_committed_choice(regs, profile, tuning_seeds, streams):
    """`clbench tune --profile P [--tuning-seeds N] --check`: the committed tuning results are complete, and each
    preset of the profile is what they choose (plugins/_shared/tuned/P.json laid over the methods' presets)."""
    pairs, left = T.tune(regs, profile, ROOT / "results" / "tuning" / profile, tuning_seeds=tuning_seeds,
                         dry_run=True)
    assert left == 0
    assert {p.stream for p in pairs} == streams
    shared = regs.profiles.get(profile).base_tuned if profile in regs.profiles else {}
    assert not any(p.label in shared.get(p.stream, ()) for p in pairs)  # (the base's choices are theirs)
    assert T.preset_mismatches([T.choice(p, 1.0) for p in pairs]) == []
    for p in pairs:  # tuned apart from reporting: twins of the reported seeds on another order
        assert not set(p.seeds) & set(p.reported_seeds) and p.order not in p.reported_orders


def test_fragility_runs_each_choices_neighbours_on_the_reported_cells(regs, tuned, tmp_path):
    """Each neighbour of a choice (0.5× and 2× its lr and strengths) runs on the reported seeds and orders, scored on
    the test split: its mean AA is the reported cells' AA rerun by hand with the neighbour's settings."""
    out, pairs, _ = tuned
    scores, left = F.fragility(regs, pairs, TEST_PROFILE, tmp_path / "fragility", options={"jobs": 1}, progress=False)
    assert left == 0 and set(scores) == {"tiny-vector/seqft", "tiny-vector/ewc"}
    assert set(scores["tiny-vector/seqft"]) == {"choice", "lr×0.5", "lr×2"}
    assert set(scores["tiny-vector/ewc"]) == {"choice", "lr×0.5", "lr×2", "strength×0.5", "strength×2"}
    ewc = next(p for p in pairs if p.label == "ewc")
    point = ewc.variants(ewc.best())["strength×2"]
    by_hand = testing.run(regs, tmp_path / "by-hand", "ewc", sets={k: [v] for k, v in point.items()},
                          seeds=ewc.reported_seeds, orders=ewc.reported_orders)
    assert all(r.config.get("train", {}).get("eval_split", "test") == "test" for r in by_hand)
    expected = sum(float(r.metrics["AA"]) for r in by_hand) / len(by_hand)
    assert scores["tiny-vector/ewc"]["strength×2"] == pytest.approx(expected, abs=1e-9)
    results = list(iter_results(tmp_path / "fragility"))
    assert {r.seed for r in results} == set(ewc.reported_seeds) and {r.order for r in results} == set(ewc.reported_orders)
    again, left = F.fragility(regs, pairs, TEST_PROFILE, tmp_path / "fragility", progress=False, dry_run=True)
    assert again == scores and left == 0
    worst, move = F.fragility_of(scores["tiny-vector/ewc"])
    moves = {k: v - scores["tiny-vector/ewc"]["choice"] for k, v in scores["tiny-vector/ewc"].items() if k != "choice"}
    assert move == min(moves.values()) == moves[worst]
    assert F.fragility_of({"choice": 50.0, "lr×2": None, "lr×0.5": 49.0}) == ("lr×2", -math.inf)


def test_neighbour_names_by_the_keys_that_moved_and_their_factor():
    choice = {"train.lr": 0.00908, "ewc.lambda": 4330.0}
    assert F.neighbour_of(dict(choice), choice) == "choice"
    assert F.neighbour_of({"train.lr": 0.00454, "ewc.lambda": 4330.0}, choice) == "lr×0.5"
    assert F.neighbour_of({"train.lr": 0.0182, "ewc.lambda": 4330.0}, choice) == "lr×2"  # 0.01816 rounded
    assert F.neighbour_of({"train.lr": 0.00908, "ewc.lambda": 8660.0}, choice) == "strength×2"
    assert F.neighbour_of({"train.lr": 0.0182, "ewc.lambda": 8660.0}, choice) is None  # both moved: no neighbour
    assert F.neighbour_of({"train.lr": 0.027, "ewc.lambda": 4330.0}, choice) is None  # ×3
    assert F.neighbour_of({"expander.lr": 2e-3}, {"expander.lr": 1e-3}) == "lr×2"  # a method's own lr
    assert F.neighbour_of({"train.lr": 1e-3}, {"train.lr": 1e-3, "ewc.lambda": 1.0}) is None


def test_fragility_on_part_of_the_reported_cells_says_on_how_many(regs, tuned, tmp_path):
    """`clbench tune --fragility DIR --fragility-seeds S`: the neighbours run on those reported seeds only; the row's
    fragility is their mean AA there minus the rerun choice's, computed here from the cells, "on k of n" of the row's
    cells. A row whose neighbours have not all reached the choice's cells is left out (still running); a neighbour
    cell that failed makes the row `not complete`; a seed that is not reported is refused."""
    from dataclasses import replace

    from clbench._tools.summary import fragility_text

    _, pairs, _ = tuned
    ewc = replace(next(p for p in pairs if p.label == "ewc"), reported_seeds=[0, 1, 2])  # (a profile reporting 3)
    seed = 1
    with pytest.raises(ConfigError, match="--fragility-seeds 99: .*ewc reports seeds"):
        F.fragility(regs, [ewc], TEST_PROFILE, tmp_path / "no", seeds=[99], dry_run=True)
    scores, left = F.fragility(regs, [ewc], TEST_PROFILE, tmp_path / "f", seeds=[seed], options={"jobs": 1},
                               progress=False)
    found = list(iter_results(tmp_path / "f"))
    assert left == 0 and {r.seed for r in found} == {seed}
    assert {r.order for r in found} == set(ewc.reported_orders)
    by_point = {}
    for r in found:
        name = F.neighbour_of(r.config["sweep"], ewc.best().point)
        by_point.setdefault(name, []).append(float(r.metrics["AA"]))
    means = {k: sum(v) / len(v) for k, v in by_point.items()}
    assert means == pytest.approx(scores["tiny-vector/ewc"], abs=1e-9)
    worst = min((k for k in means if k != "choice"), key=lambda k: means[k])
    # the reported cells: the choice's settings on every reported seed and order
    choice = [r for r in found if F.neighbour_of(r.config["sweep"], ewc.best().point) == "choice"]
    reported = [replace(r, method="ewc", seed=s) for r in choice for s in ewc.reported_seeds]
    row = F.fragility_scores(reported, found)[("tiny-vector", "ewc")]
    n = len(ewc.reported_orders)
    assert row == F.RowFragility(worst, pytest.approx(means[worst] - means["choice"], abs=1e-9), n,
                                 n * len(ewc.reported_seeds))
    assert f"({worst}; {n} of {n * len(ewc.reported_seeds)} cells)" in fragility_text(row, 100.0)
    one = next(r for r in found if F.neighbour_of(r.config["sweep"], ewc.best().point) == worst)
    assert ("tiny-vector", "ewc") not in F.fragility_scores(reported, [r for r in found if r is not one])
    failed = [replace(r, status="failed") if r is one else r for r in found]
    assert F.fragility_scores(reported, failed)[("tiny-vector", "ewc")].move == -math.inf


@pytest.mark.slow
def test_the_leaderboards_fragility_column_is_the_committed_trees_read_by_hand(regs, tmp_path):
    """`clbench leaderboard results/quick --fragility results/fragility/quick`: GEM's row on split-digits-cil shows
    its worst neighbour's mean AA minus its choice's over the reported cells, both computed here from the cell
    folders' result.json files: the choice is the folder whose point is the reported cells' lr and margin, a
    neighbour one whose lr alone or margin alone is half or twice it."""
    import json as _json

    from click.testing import CliRunner

    from clbench._cli.main import build_cli

    reported = sorted((ROOT / "results/quick/split-digits-cil/gem").glob("order-*/seed-*/result.json"))
    config = _json.loads(reported[0].read_text())["config"]
    centre = {"train.lr": config["train"]["lr"], "gem.margin": config["methods"]["gem"]["margin"]}
    cells = {(p.parent.parent.name, p.parent.name) for p in reported}
    means = {}
    for folder in (ROOT / "results/fragility/quick/split-digits-cil").glob("gem@*"):
        files = sorted(folder.glob("order-*/seed-*/result.json"))
        point = _json.loads(files[0].read_text())["config"]["sweep"]
        ratio = {k: point[k] / centre[k] for k in centre}
        moved = [k for k, r in ratio.items() if abs(r - 1) > 1e-9]
        if not moved:
            name = "choice"
        elif len(moved) == 1 and min(abs(ratio[moved[0]] - f) for f in (0.5, 2)) < 0.01:
            name = f"{'lr' if moved[0] == 'train.lr' else 'strength'}×{round(ratio[moved[0]], 1):g}"
        else:
            continue  # an old choice's neighbour: not this row's
        assert {(p.parent.parent.name, p.parent.name) for p in files} == cells
        means[name] = sum(_json.loads(p.read_text())["metrics"]["AA"] for p in files) / len(files)
    assert set(means) == {"choice", "lr×0.5", "lr×2", "strength×0.5", "strength×2"}
    worst = min((k for k in means if k != "choice"), key=lambda k: means[k])
    move = means[worst] - means["choice"]
    result = CliRunner().invoke(build_cli(regs), ["leaderboard", str(ROOT / "results/quick"), "--fragility",
                                                  str(ROOT / "results/fragility/quick"), "--out", str(tmp_path),
                                                  "--no-plots", "--stream", "split-digits-cil"], obj=regs)
    assert result.exit_code == 0, result.output
    board = (tmp_path / "quick.md").read_text()
    row = next(line for line in board.splitlines() if line.startswith("|") and "| gem " in line)
    flag = " ⚑" if move < -2 else ""  # Δ = 2 pp on a class-incremental stream
    assert f"| {move:+.2f} ({worst}){flag} " in row
    assert "`fragility`: the worst of the row's neighbours" in board


@pytest.mark.slow
@pytest.mark.parametrize(("profile", "tree"), [
    ("bench-equal-steps", "results/bench-equal-steps"),
    ("bench-memory-200", "results/bench-memory/200"),
])
def test_pairs_that_share_the_base_tuning_train_as_the_base_does(regs, profile, tree):
    """`ProfileSpec.base_tuned` is a claim: each declared pair resolves to the base profile's settings (but the
    track's own) and takes its optimizer steps on every task, cell by cell of the committed trees; a pair that does
    not (Joint at equal steps takes 422 steps a task, not 422, 844, 1266; GEM at memory 200 keeps 66 a task, not 256,
    and has a learning rate tuned there) is caught."""
    from dataclasses import replace

    spec = regs.profiles.get(profile)
    track, base = list(iter_results(ROOT / tree)), list(iter_results(ROOT / "results" / "bench"))
    assert T.base_tuned_mismatches(spec, track, base) == []
    assert sum(len(v) for v in spec.base_tuned.values()) >= 20  # (the claim covers the pairs it names)
    wrong = {"bench-equal-steps": ("permuted-mnist", "joint", "optimizer steps a task [(422,), (422,), (422,)] here, "
                                   "[(422,), (844,), (1266,)]"),
             "bench-memory-200": ("permuted-mnist", "gem", "methods.gem, train.lr differ")}[profile]
    claimed = replace(spec, base_tuned={wrong[0]: (wrong[1],)})
    found = T.base_tuned_mismatches(claimed, track, base)
    cells = [r for r in track if (r.stream, r.method) == wrong[:2]]
    assert len(found) == len(cells) >= 10 and all(wrong[2] in line for line in found)  # every cell of the row


@pytest.mark.slow
def test_a_tracks_rows_that_train_as_at_the_base_read_the_bases_neighbours(regs):
    """At bench-memory-200 DER++ is declared to train exactly as at bench (`base_tuned`; the test above checks the
    claim), so `clbench tune` runs no neighbours for it there and its row reads bench's: the same worst neighbour and
    move as bench's DER++ row, computed from bench's own cells, on 4 of the track row's 20 cells, marked `at bench`.
    A row the track tunes itself (GEM) never reads the base's, and without the declaration DER++ does not either; a
    labelled board's row reads what its own tree's row reads."""
    from dataclasses import replace
    from types import SimpleNamespace

    from clbench._tools.summary import fragility_text

    stream = "split-mnist-cil"
    track = [r for r in iter_results(ROOT / "results/bench-memory/200" / stream) if r.method in ("derpp", "gem")]
    base = [r for r in iter_results(ROOT / "results/bench" / stream) if r.method in ("derpp", "gem")]
    neighbours = list(iter_results(ROOT / "results/fragility/bench" / stream))
    spec = regs.profiles.get("bench-memory-200")
    assert "derpp" in spec.base_tuned[stream] and "gem" not in spec.base_tuned[stream]
    at_base = F.fragility_scores(base, neighbours)[(stream, "derpp")]
    rows = F.row_fragility(regs, track, neighbours)
    assert rows[(stream, "derpp")] == replace(at_base, at="bench")
    assert (rows[(stream, "derpp")].cells, rows[(stream, "derpp")].of) == (4, 20)
    assert (stream, "gem") not in rows
    assert "; 4 of 20 cells; at bench)" in fragility_text(rows[(stream, "derpp")], 100.0)
    undeclared = SimpleNamespace(profiles={"bench-memory-200": replace(spec, base_tuned={})})
    assert F.row_fragility(undeclared, track, neighbours) == {}
    # beside another tree (`clbench leaderboard A B --label 200 --label 500`): the rows are METHOD@200, the same
    labelled = [replace(r, method=f"{r.method}@200", config={**r.config, "profile": "bench-memory-200+bench-memory-500",
                                                               "tree_profile": "bench-memory-200"}) for r in track]
    assert F.row_fragility(regs, labelled, neighbours) == {(stream, "derpp@200"): rows[(stream, "derpp")]}
    # and its presets are its tree's lineage's: DER++@200 ran on bench's presets, not on the training defaults
    from clbench._cli.commands.leaderboard import _tree_lineage
    from clbench._tools.leaderboard import method_labels

    lineage = _tree_lineage(regs, labelled)
    assert lineage == ("bench", "bench-memory-200")
    assert method_labels(["derpp@200"], regs.methods.items, lineage, stream) == {"derpp@200": "derpp@200"}
    assert method_labels(["derpp@200"], regs.methods.items, ("bench-memory-200",), stream)["derpp@200"].endswith(
        "(defaults)")  # (what the board said when it looked the label up under the track's name alone)


@pytest.mark.slow
def test_tune_write_says_the_presets_it_compares_were_read_before_the_write(regs, tmp_path):
    """`clbench tune --write FILE` writes the choices; the presets it compares them with are those loaded at start,
    so a difference it counts is said to be against them, with the command that reads the new file."""
    from click.testing import CliRunner

    from clbench._cli.main import build_cli

    out = tmp_path / "tuning"
    args = ["tune", "--profile", TEST_PROFILE, "--stream", "tiny-vector", "--methods", "seqft", "--trials", "4",
            "--out", str(out), "--jobs", "1", "--no-progress"]
    result = CliRunner().invoke(build_cli(regs), [*args, "--write", str(tmp_path / "tuned.json")], obj=regs)
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "tuned.json").read_text())
    assert list(written["methods"]) == ["seqft"]
    assert f"presets differ from the choice (as loaded before --write {tmp_path / 'tuned.json'}" in result.output
    again = CliRunner().invoke(build_cli(regs), args, obj=regs)  # no --write: no such remark
    assert "presets differ from the choice;" in again.output or again.output.rstrip().endswith("from the choice")
    assert "as loaded before" not in again.output
