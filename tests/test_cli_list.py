"""`clbench list`: each item with its plugin and distribution; `clbench list settings NAME`: a method's, model's
or stream's settings with type, default, range, presets per profile key and the help documenting each (the
field's ``help`` metadata, from ``bounded(..., help=)`` or ``setting(..., help=)``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass

import pytest

import clbench as clbench_pkg
from clbench import config as cfg
from clbench import hookimpl, testing
from clbench._cli import main as clbench_cli
from clbench._cli.commands import settings as settings_mod
from clbench._cli.commands.settings import REQUIRED, Setting, config_settings
from clbench._exec.local import harness_registry
from clbench.config import bounded, field_for, public_name, setting
from clbench.errors import ClbenchError, ConfigError, UnknownNameError
from clbench.specs import EmptyConfig, ModelSpec


def clbench(capsys, monkeypatch, *args, plugins=()):
    if plugins:
        monkeypatch.setattr(clbench_cli, "harness_registry",
                            lambda disabled=(): testing.registry(*plugins, disabled=disabled))
    with pytest.raises(SystemExit) as exit_:
        clbench_cli.main(list(args))
        raise SystemExit(0)
    out = capsys.readouterr()
    return exit_.value.code or 0, out.out, out.err


@pytest.fixture(scope="module")
def regs():
    return testing.registry()


# ------------------------------------------------------------------------------------------- clbench list
def test_list_names_the_plugin_and_the_distribution(capsys, monkeypatch):
    code, out, err = clbench(capsys, monkeypatch, "list", "methods")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "methods:"
    assert "  lotto                  LoTA with masks disjoint from earlier tasks'  (plugin lota, clbench 0.1.0)" in lines
    assert ("  ewc                    elastic weight consolidation, diagonal Fisher (Kirkpatrick 2017)  "
            "(plugin ewc, clbench 0.1.0)") in lines
    assert "streams:" not in lines

    code, out, _ = clbench(capsys, monkeypatch, "list", "executors")
    assert code == 0
    assert ("  local                  cells on this machine: in this process, or in --jobs N worker processes (auto: "
            "one per CPU when every cell runs on the CPU)  (plugin clbench.local, clbench 0.1.0)") in out.splitlines()


def test_a_plugin_of_no_distribution_is_listed_so(capsys, monkeypatch):
    code, out, _ = clbench(capsys, monkeypatch, "list", "models", plugins=[_ModelPlugin("extra-model")])
    assert code == 0
    assert ("  tiny-text              bag-of-words model with q/v layers (tests only)  "
            "(plugin clbench.testing.tiny.TinyPlugin, no installed distribution)") in out.splitlines()
    assert "  extra-model            a model for this test  (plugin test_cli_list._ModelPlugin, no installed distribution)" \
        in out.splitlines()


def _tuned(method: str) -> dict:
    """The method's tuned presets of every profile (plugins/_shared/tuned/*.json, as `clbench tune --write` made
    them), read apart from the plugin's own loader."""
    import json
    from pathlib import Path

    out: dict = {}
    for path in sorted((Path(__file__).resolve().parent.parent / "plugins" / "_shared" / "tuned").glob("*.json")):
        out.update(json.loads(path.read_text())["methods"].get(method, {}))
    return out


# ------------------------------------------------------------------------------------------- the rows
def test_ewc_settings(regs):
    rows = {r.name: r for r in settings_mod.settings(regs, "ewc")}
    from clbench_plugins._shared.table1_presets import FULL_FT  # the paper profiles' full-fine-tuning rows

    assert list(rows)[:6] == ["lambda", "fisher_samples", "fisher_batch_size", "fisher_weight", "decay",
                              "train.optimizer"]
    assert set(rows) == {"lambda", "fisher_samples", "fisher_batch_size", "fisher_weight", "decay"} | {
        k for values in FULL_FT.values() for k in values}
    lam = rows["lambda"]
    assert (lam.key, lam.type, lam.default, lam.range, lam.in_config) == ("ewc.lambda", "float", 100.0, ">= 0", True)
    assert lam.help.startswith("the paper tunes λ per benchmark; the quick presets come from `clbench tune`")
    # quick's four streams, bench's four, bench-equal-compute's four and bench-equal-steps' two split streams (on the
    # permuted ones EWC trains at equal steps as at its own budget: bench's presets)
    tuned = _tuned("ewc")
    assert dict(lam.presets) == {k: v["lambda"] for k, v in tuned.items()} and len(tuned) == 14
    lr = rows["train.lr"]  # a preset outside the method's config, shown under its key
    assert not lr.in_config and dict(lr.presets) == {
        **{k: v["train.lr"] for k, v in tuned.items()}, **{k: v["train.lr"] for k, v in FULL_FT.items()}}
    assert rows["decay"].range == ">= 0 and <= 1" and rows["decay"].help == "γ of online EWC: F ← γ·F + F_k"
    assert rows["fisher_samples"].presets == {}


def test_mlp_hidden(regs):
    rows = {r.name: r for r in settings_mod.settings(regs, "mlp")}
    hidden = rows["hidden"]
    assert (hidden.key, hidden.type, hidden.default, hidden.range) == ("model.hidden", "tuple[int, ...]", (256, 256), "")
    assert hidden.help == "widths of the hidden layers; () = a linear model"
    # a model's settings are preset by the streams whose preset names it, under profile/stream
    assert hidden.presets["test/tiny-vector"] == [16]
    assert rows["dropout"].range == ">= 0 and < 1" and rows["dropout"].help == ""
    assert all(r.in_config for r in rows.values())


def test_method_presets_outside_its_config_are_shown_under_their_key(regs):
    spec = regs.methods.get("lotto")
    rows = settings_mod.settings(regs, "lotto")
    epochs = [r for r in rows if r.key == "train.epochs"]
    assert epochs == [Setting(name="train.epochs", key="train.epochs", in_config=False,
                              presets={k: v["train.epochs"] for k, v in spec.presets.items() if "train.epochs" in v})]
    assert rows[-1] is epochs[0]  # after the dataclass's own settings


def test_stream_settings_take_the_stream_scope(regs):
    rows = {r.key: r for r in settings_mod.settings(regs, "permuted-digits")}
    assert rows["stream.tasks"].help == "permuted-digits only: how many permutations"
    assert rows["stream.tasks"].range == ">= 1 and <= 100"
    assert not rows["model"].in_config and rows["model"].presets == {"quick": "mlp"}
    assert rows["train.lr"].presets == {"quick": 0.05}


def test_unknown_and_ambiguous_names(regs):
    with pytest.raises(UnknownNameError, match="unknown method, model or stream 'ewcc' — did you mean 'ewc'"):
        settings_mod.settings(regs, "ewcc")
    with pytest.raises(UnknownNameError, match="unknown model 'ewc'"):
        settings_mod.settings(regs, "ewc", "model")
    both = testing.registry(_ModelPlugin("tiny-vector"))
    with pytest.raises(ClbenchError, match=r"'tiny-vector' is a model and a stream: add --kind model\|stream"):
        settings_mod.settings(both, "tiny-vector")
    assert settings_mod.settings(both, "tiny-vector", "stream")[0].key == "orders"  # EmptyConfig: preset keys only
    assert settings_mod.settings(both, "tiny-vector", "model") == []


# ------------------------------------------------------------------------------------------- help
@dataclass(frozen=True)
class Documented:
    """A docstring is no help."""

    needed: int = setting(help="a required field")
    # a comment is for the code's readers: never printed
    lr: float = bounded(0.1, gt=0, help="the learning rate")  # nor is this one
    plain: int = 3  # no help: printed without any
    tags: tuple[str, ...] = setting(default_factory=lambda: ("a#b",), help="tags # and all")
    seen: int = field(default=0, init=False, metadata={"help": "not a setting: no row"})


@dataclass(frozen=True)
class Derived(Documented):
    plain: int = setting(4, help="overridden, with its own help")
    lr: float = bounded(0.2, gt=0)  # declared again without help: the subclass's field wins


def test_help_is_field_metadata():
    lr, tags = (f for f in fields(Documented) if f.name in ("lr", "tags"))
    assert lr.metadata == {"range": {"gt": 0}, "help": "the learning rate"}
    assert tags.metadata == {"help": "tags # and all"} and Documented(1).tags == ("a#b",)
    assert bounded(1).metadata["help"] == "" and clbench_pkg.setting is setting


def test_config_settings_of_a_test_dataclass():
    rows = {r.name: r for r in config_settings(Documented, "x")}
    assert list(rows) == ["needed", "lr", "plain", "tags"]
    assert rows["needed"] == Setting(name="needed", key="x.needed", type="int", default=REQUIRED,
                                     help="a required field")
    assert rows["lr"] == Setting(name="lr", key="x.lr", type="float", default=0.1, range="> 0",
                                 help="the learning rate")
    assert rows["plain"].help == "" and rows["tags"].default == ("a#b",) and rows["tags"].help == "tags # and all"
    derived = {r.name: r for r in config_settings(Derived, "x")}
    assert (derived["plain"].default, derived["plain"].help) == (4, "overridden, with its own help")
    assert (derived["lr"].default, derived["lr"].range, derived["lr"].help) == (0.2, "> 0", "")
    assert derived["tags"].help == "tags # and all"  # inherited with its field
    Required = make_dataclass("Required", [("n", int)])  # no source to read, none needed
    [n] = config_settings(Required)
    assert (n.name, n.key, n.type, n.default, n.help) == ("n", "n", "int", REQUIRED, "")
    assert config_settings(EmptyConfig) == []


@dataclass(frozen=True)
class Keyword:
    lambda_: float = bounded(1.0, ge=0, help="λ, a keyword: the field is lambda_")
    fisher_samples: int = 8


def test_lambda_underscore_is_lambda_through_one_mapping():
    assert (public_name("lambda_"), public_name("lr")) == ("lambda", "lr")
    names = [f.name for f in fields(Keyword)]
    assert field_for("lambda", names) == field_for("lambda_", names) == "lambda_"
    assert field_for("fisher-samples", names) == "fisher_samples" and field_for("gamma", names) is None
    [lam, _] = config_settings(Keyword, "m")
    assert (lam.name, lam.key, lam.help) == ("lambda", "m.lambda", "λ, a keyword: the field is lambda_")
    built = cfg.apply(Keyword, None, {"lambda": 2.0, "fisher-samples": 3}, "m")  # --set m.lambda=2
    assert (built.lambda_, built.fisher_samples) == (2.0, 3)
    assert cfg.to_dict(built) == {"lambda": 2.0, "fisher_samples": 3}
    with pytest.raises(ConfigError, match=r"m\.lambda=-1\.0 is out of range"):
        cfg.apply(Keyword, None, {"lambda": -1.0}, "m")
    with pytest.raises(ConfigError, match="Settings: fisher_samples, lambda$"):
        cfg.apply(Keyword, None, {"gamma": 1}, "m")


# ------------------------------------------------------------------------------------------- the command
def test_list_settings_prints_each_setting(capsys, monkeypatch):
    code, out, err = clbench(capsys, monkeypatch, "list", "settings", "ewc")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:3] == [
        "method ewc (plugin ewc, clbench 0.1.0): elastic weight consolidation, diagonal Fisher (Kirkpatrick 2017)",
        "settings of EWCConfig (--set ewc.NAME=VALUE):",
        "  lambda: float = 100.0  (>= 0)",
    ]
    decay = lines.index("  decay: float = 1.0  (>= 0 and <= 1)")
    assert lines[decay + 1] == "      γ of online EWC: F ← γ·F + F_k"
    tuned = _tuned("ewc")
    assert f"      preset quick/permuted-digits: {tuned['quick/permuted-digits']['lambda']!r}" in lines
    assert f"      preset quick/split-digits: {tuned['quick/split-digits']['lambda']!r}" in lines


def test_list_settings_of_a_model_and_of_a_stream(capsys, monkeypatch):
    code, out, _ = clbench(capsys, monkeypatch, "list", "settings", "mlp", "--kind", "model")
    assert code == 0
    lines = out.splitlines()
    assert lines[1:4] == ["settings of MLPConfig (--set model.NAME=VALUE):",
                          "  hidden: tuple[int, ...] = (256, 256)",
                          "      widths of the hidden layers; () = a linear model"]
    code, out, _ = clbench(capsys, monkeypatch, "list", "settings", "split-digits")
    assert code == 0
    lines = out.splitlines()
    i = lines.index("other keys its presets set:")
    assert lines[i + 1:i + 3] == ["  model", "      preset quick: 'mlp'"]


@pytest.mark.parametrize(("args", "needle"), [
    (["list", "settings", "ewcc"], "error: unknown method, model or stream 'ewcc' — did you mean 'ewc'?"),
    (["list", "settings", "ewc", "--kind", "stream"], "error: unknown stream 'ewc'"),
    (["list", "settings"], "clbench list settings NAME: name a method, model or stream"),
    (["list", "methods", "ewc"], "unexpected argument 'ewc': only `clbench list settings NAME` takes a name"),
    (["list", "methods", "--kind", "method"], "--kind goes with `clbench list settings NAME`"),
])
def test_list_mistakes_are_one_clear_line(capsys, monkeypatch, args, needle):
    code, out, err = clbench(capsys, monkeypatch, *args)
    assert code == 2 and needle in err and "Traceback" not in err


def test_an_ambiguous_name_asks_for_kind(capsys, monkeypatch):
    plugin = _ModelPlugin("tiny-vector")
    code, _, err = clbench(capsys, monkeypatch, "list", "settings", "tiny-vector", plugins=[plugin])
    assert code == 2 and "error: 'tiny-vector' is a model and a stream: add --kind model|stream" in err
    code, out, _ = clbench(capsys, monkeypatch, "list", "settings", "tiny-vector", "--kind", "model", plugins=[plugin])
    assert code == 0
    assert out.splitlines() == ["model tiny-vector (plugin test_cli_list._ModelPlugin, no installed distribution): "
                                "a model for this test", "no settings"]


class _ModelPlugin:
    def __init__(self, name: str) -> None:
        self.name = name

    @hookimpl
    def clbench_add_models(self) -> list[ModelSpec]:
        return [ModelSpec(self.name, lambda cfg, info: None, EmptyConfig, "a model for this test")]


def test_every_installed_plugin_setting_is_readable():
    regs = harness_registry()
    for kind in settings_mod.KINDS:
        for name in regs.kind(kind + "s"):
            rows = settings_mod.settings(regs, name, kind)
            assert all(r.type for r in rows if r.in_config), (kind, name)


def test_list_plugins_names_every_plugin_with_what_it_offers(capsys):
    from clbench._cli.main import main

    main(["list", "plugins"])  # returns: exit 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    # observer-only and option-only plugins appear too: what `-p no:NAME` takes
    assert "options logger; observes cell_end, cell_start, step, task_end" in lines["loggers"]
    assert lines["lota"].split(None, 1)[1].endswith("methods lota, lotto")
    assert "methods dense-ewc, expander, expander-ewc, random-mask-ewc" in lines["expander_ewc"]
    # a paper's numbers, and the profile that runs two of its columns at a tenth of its epochs
    assert lines["lps_paper"].split(None, 1)[1].endswith("profiles paper-lps-tenth; targets paper-lps, paper-lps-tenth")
