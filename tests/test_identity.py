"""A cell is its resolved configuration: the config hash, its round trip through result.json, sweeps."""

from __future__ import annotations

import json

import pytest

from clbench import testing
from clbench._core.cells import cell_from_result
from clbench._core.plan import RunRequest, make_plan
from clbench.cell import config_diff, config_hash, identity, path_component


@pytest.fixture(scope="module")
def regs():
    return testing.registry()


def _cells(regs, methods="ewc,seqft", sets=None, **kw):
    kw.setdefault("seeds", [0])
    req = RunRequest(methods=methods, streams=["split-digits"], orders=["1"], sets=sets or {}, **kw)
    return {c.method: c for c in make_plan(regs, req).cells}


def test_same_settings_same_hash_and_every_scope_changes_it(regs):
    base = _cells(regs)["ewc"]
    assert _cells(regs)["ewc"].config_hash == base.config_hash  # a second plan: the same identity
    for key, value in [("ewc.lambda", 3.0), ("train.lr", 0.5), ("train.threads", 2), ("model.dropout", 0.1),
                       ("stream.test_fraction", 0.25), ("metrics.tolerance", 1e-2), ("metrics.acr", "task"),
                       ("metrics.awom", "transposed"), ("metrics.delta_w", "factors"), ("train.tf32", False)]:
        changed = _cells(regs, sets={key: [value]})["ewc"]
        assert changed.config_hash != base.config_hash, key
    # the seed and order are part of the identity; where results go and plugin run options are not
    profile_seeds = make_plan(regs, RunRequest(methods="ewc", streams=["split-digits"], orders=["1"])).cells
    assert [c.seed for c in profile_seeds] == [0, 1, 2]  # the quick profile's seeds
    assert profile_seeds[0].config_hash == base.config_hash
    other_seed = make_plan(regs, RunRequest(methods="ewc", streams=["split-digits"], orders=["1"], seeds=[1])).cells[0]
    assert other_seed.config_hash != base.config_hash
    moved = make_plan(regs, RunRequest(methods="ewc", streams=["split-digits"], orders=["1"], seeds=[0],
                                       out="elsewhere", options={"x": 1})).cells[0]
    assert moved.config_hash == base.config_hash


def test_metric_forms_added_later_keep_the_hash_of_results_written_before_them(regs):
    cell = _cells(regs)["ewc"]
    resolved = cell.resolved()
    assert resolved["metrics"]["awom"] == "eq8" and resolved["metrics"]["acr"] == "layer"
    before = {**resolved, "metrics": {"tolerance": 1e-3, "samples": 0}}  # a result of 2026-11-23
    before["train"] = {k: v for k, v in resolved["train"].items() if k != "tf32"}  # (tf32: 2026-11-25)
    assert resolved["train"]["tf32"] is True
    assert config_hash(before, cell.stream, cell.order, cell.seed, cell.identity_since) == cell.config_hash


def test_the_hash_is_sha256_of_the_canonical_identity(regs):
    import hashlib

    cell = _cells(regs)["ewc"]
    since = cell.identity_since  # EWC's fisher_weight at its first value is left out
    text = json.dumps(identity(cell.resolved(), cell.stream, cell.order, cell.seed, since), sort_keys=True,
                      separators=(",", ":"))
    assert cell.config_hash == hashlib.sha256(text.encode()).hexdigest()
    assert config_hash(cell.resolved(), cell.stream, cell.order, cell.seed, since) == cell.config_hash
    assert "fisher_weight" in cell.resolved()["methods"]["ewc"]  # recorded, all the same


def test_a_result_records_every_setting_its_cell_is_rebuilt_with_the_same_hash(regs, tmp_path, one_thread):
    [result] = testing.run(regs, tmp_path, "ewc", stream="split-digits", profile="quick", orders=["1"],
                           sets={"train.epochs": [1], "ewc.fisher_samples": [32]})
    stored = json.loads(result.path.read_text())
    assert stored["config_hash"] == result.config_hash and stored["schema_version"] == 2
    rebuilt = cell_from_result(regs, result, tmp_path / "again")
    assert rebuilt.config_hash == result.config_hash
    assert rebuilt.train.epochs == 1 and rebuilt.methods_cfg["ewc"].fisher_samples == 32


def test_config_diff_names_each_changed_setting():
    old = {"methods": {"ewc": {"lambda": 10.0}}, "train": {"lr": 0.1}}
    new = {"methods": {"ewc": {"lambda": 3.0}}, "train": {"lr": 0.1, "threads": 1}}
    assert config_diff(old, new) == ["methods.ewc.lambda: 10.0 → 3.0", "train.threads: (absent) → 1"]


def test_a_sweep_multiplies_only_the_method_it_names(regs):
    cells = _cells(regs, sets={"ewc.lambda": [1, 2]})
    assert sorted(cells) == ["ewc@lambda=1", "ewc@lambda=2", "seqft"]
    assert cells["ewc@lambda=2"].methods_cfg["ewc"].lambda_ == 2.0
    both = _cells(regs, sets={"ewc.lambda": [1, 2], "train.lr": [0.1, 0.2]})
    assert len(both) == 6 and "seqft@train.lr=0.2" in both  # a train sweep still multiplies every method


@pytest.mark.parametrize(("text", "expected"), [
    ("ewc", "ewc"), ("olora+nlora", "olora+nlora"), ("lps@beta=0.5", "lps@beta=0.5"),
    ("ewc@train.device=../../x", "ewc@train.device=..%2F..%2Fx"), ("..", "%2E%2E"), (".", "%2E"),
    ("a b\\c", "a%20b%5Cc"),
])
def test_a_label_is_one_safe_folder_name(text, expected):
    assert path_component(text) == expected


def test_a_preset_naming_a_disabled_plugins_stream_warns_instead_of_refusing():
    """`-p no:digits` removes the streams ewc's presets are keyed to: a typo cannot be told from that, so the
    preset is skipped with a warning naming the disabled plugin (a typo with nothing disabled is refused:
    tests/faultsuite.py, preset-unknown-*)."""
    regs = testing.registry(disabled=("digits",))
    with pytest.warns(UserWarning, match=r"preset 'quick/split-digits' that names no stream 'split-digits'"
                                         r"( — did you mean '[^']+'\?)? \(or one of the disabled plugins digits "
                                         r"provides it\)"):
        plan = make_plan(regs, RunRequest(methods="expander", streams=["cl-quick"], seeds=[0]))
    assert [c.method for c in plan.cells] == ["expander"]


def _cl_benchmark_folder(root):
    """Planning the standard stream checks its files exist (they are read when a cell trains)."""
    from clbench_plugins._shared.cl_data import GROUPS
    from clbench_plugins.cl_benchmark.streams import STANDARD_ORDERS

    for task in {t for order in STANDARD_ORDERS.values() for t in order}:
        folder = root / GROUPS[task] / task
        folder.mkdir(parents=True)
        (folder / "labels.json").write_text('["x"]')
        for name in ("train", "test"):
            (folder / f"{name}.json").write_text('[{"sentence": "s", "label": "x"}]')
    return str(root)


def test_path_flags_win_over_presets_and_lose_to_an_explicit_set(regs, tmp_path):
    # the paper-t5 profile's presets name the hub model; --model-path must reach the cell (under the preset it
    # silently loaded google-t5/t5-large), and an explicit --set of the same key wins over either flag
    data, other = _cl_benchmark_folder(tmp_path / "a"), _cl_benchmark_folder(tmp_path / "b")

    def plan(**kw):
        req = RunRequest(methods="nlora", profile="paper-t5", streams=["standard"], orders=["1"], seeds=[0], **kw)
        [cell] = make_plan(regs, req).cells
        return cell

    assert plan(data_dir=data).model_cfg.name_or_path == "google-t5/t5-large"
    flagged = plan(data_dir=data, model_path="/models/t5")
    assert flagged.model_cfg.name_or_path == "/models/t5" and flagged.stream_cfg.data_dir == data
    explicit = plan(data_dir=data, model_path="/models/t5",
                    sets={"model.name_or_path": ["/other"], "stream.data_dir": [other]})
    assert explicit.model_cfg.name_or_path == "/other" and explicit.stream_cfg.data_dir == other


def test_the_resolved_configuration_is_built_once_per_cell_and_survives_pickling(regs):
    """One resolved configuration from planning to result.json: the same dict object on every call (the planner's
    checks, the hash and the result file share it); a pickled cell (how a worker gets it) resolves to an equal one
    with the same hash; a replaced cell resolves afresh."""
    import dataclasses
    import pickle

    cell = _cells(regs)["ewc"]
    first = cell.resolved()
    assert cell.resolved() is first and first["methods"]["ewc"]["lambda"] == cell.methods_cfg["ewc"].lambda_
    shipped = pickle.loads(pickle.dumps(cell))
    assert shipped.resolved() == first and shipped.config_hash == cell.config_hash
    other = dataclasses.replace(cell, train=dataclasses.replace(cell.train, lr=0.5))
    assert other.resolved()["train"]["lr"] == 0.5 and first["train"]["lr"] == cell.train.lr != 0.5
    assert other.config_hash != cell.config_hash


def test_a_stored_setting_renamed_since_reads_with_the_file_and_the_version_that_made_it(tmp_path):
    import copy
    from pathlib import Path

    from clbench._core.results import read_result
    from clbench.errors import ConfigError

    regs = testing.registry()
    path = Path("results/quick/split-digits/ewc/order-1/seed-0/result.json")
    stored = read_result(Path(__file__).parents[1] / path)
    assert cell_from_result(regs, stored, tmp_path).config_hash == stored.config_hash
    renamed = copy.deepcopy(stored)
    renamed.config["methods"]["ewc"]["lambda_old"] = renamed.config["methods"]["ewc"].pop("lambda")
    with pytest.raises(ConfigError, match=r"result\.json: its stored settings do not fit .*'lambda_old'.*"
                                          r"made by clbench \d"):
        cell_from_result(regs, renamed, tmp_path)
