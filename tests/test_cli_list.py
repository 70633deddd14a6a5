"""`clbench list`: each item with its plugin and distribution; `clbench list settings NAME`: a method's, model's
or stream's settings with type, default, range, presets per profile key and the comment documenting each."""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass

import pytest

from clbench import hookimpl, testing
from clbench._cli import main as clbench_cli
from clbench._cli.commands import settings as settings_mod
from clbench._cli.commands.settings import REQUIRED, Setting, config_settings, field_comments
from clbench._exec.local import harness_registry
from clbench.config import bounded
from clbench.errors import ClbenchError, UnknownNameError
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
            "(plugin clbench._cli.kit.TinyPlugin, no installed distribution)") in out.splitlines()
    assert "  extra-model            a model for this test  (plugin test_cli_list._ModelPlugin, no installed distribution)" \
        in out.splitlines()


# ------------------------------------------------------------------------------------------- the rows
def test_ewc_settings(regs):
    rows = {r.name: r for r in settings_mod.settings(regs, "ewc")}
    assert list(rows) == ["lambda", "fisher_samples", "fisher_batch_size", "decay", "train.lr"]
    lam = rows["lambda"]
    assert (lam.key, lam.type, lam.default, lam.range, lam.in_config) == ("ewc.lambda", "float", 100.0, ">= 0", True)
    assert lam.comment.startswith("the paper tunes λ per benchmark; the quick presets (plugin.py) come from the "
                                  "validation protocol")
    assert dict(lam.presets) == {"quick/permuted-digits": 10.0, "quick/permuted-digits-til": 100.0,
                                 "quick/split-digits": 1000.0, "quick/split-digits-cil": 10.0}
    lr = rows["train.lr"]  # a preset outside the method's config, shown under its key
    assert not lr.in_config and dict(lr.presets) == {"quick/permuted-digits": 0.05, "quick/permuted-digits-til": 0.025,
                                                     "quick/split-digits": 0.0125, "quick/split-digits-cil": 0.0125}
    assert rows["decay"].range == ">= 0 and <= 1" and rows["decay"].comment == "γ of online EWC: F ← γ·F + F_k"
    assert rows["fisher_samples"].presets == {}


def test_mlp_hidden(regs):
    rows = {r.name: r for r in settings_mod.settings(regs, "mlp")}
    hidden = rows["hidden"]
    assert (hidden.key, hidden.type, hidden.default, hidden.range) == ("model.hidden", "tuple[int, ...]", (256, 256), "")
    assert hidden.comment == "widths of the hidden layers; () = a linear model"
    # a model's settings are preset by the streams whose preset names it, under profile/stream
    assert hidden.presets["test/tiny-vector"] == [16]
    assert rows["dropout"].range == ">= 0 and < 1" and rows["dropout"].comment == ""
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
    assert rows["stream.tasks"].comment == "permuted-digits only: how many permutations"
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


# ------------------------------------------------------------------------------------------- comments
@dataclass(frozen=True)
class Documented:
    """A docstring # that is no comment."""

    # The learning rate,
    # over two lines.
    lr: float = bounded(0.1, gt=0)  # and its own line
    # a comment that a blank line separates from the field below

    plain: int = 3
    # above a multi-line field
    tags: tuple[str, ...] = field(
        default=("a#b",),  # inside the call
    )
    label: str = "# not a comment"  # noqa: E501
    needed: int = field(default_factory=lambda: 7)  # from a factory

    def method(self) -> int:
        # a comment in a method's body
        return 1

    # after the method
    last: bool = False


@dataclass(frozen=True)
class Derived(Documented):
    plain: int = 4  # overridden, with its own comment


def test_comments_are_read_with_tokenize():
    comments = field_comments(Documented)
    assert comments == {
        "lr": "The learning rate, over two lines. and its own line",
        "plain": "",
        "tags": "above a multi-line field inside the call",
        "label": "",  # a `#` in a string is no comment; a noqa pragma documents nothing
        "needed": "from a factory",
        "last": "after the method",
    }
    assert field_comments(Derived)["plain"] == "overridden, with its own comment"
    assert field_comments(Derived)["lr"] == comments["lr"]


def test_config_settings_of_a_test_dataclass():
    rows = {r.name: r for r in config_settings(Documented, "x")}
    assert rows["lr"] == Setting(name="lr", key="x.lr", type="float", default=0.1, range="> 0",
                                 comment="The learning rate, over two lines. and its own line")
    assert rows["needed"].default == 7 and rows["tags"].default == ("a#b",)
    Required = make_dataclass("Required", [("n", int)])  # no source to read: no comments, no failure
    [n] = config_settings(Required)
    assert (n.name, n.key, n.type, n.default, n.comment) == ("n", "n", "int", REQUIRED, "")
    assert config_settings(EmptyConfig) == []


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
    assert "      preset quick/permuted-digits: 10.0" in lines
    assert "      preset quick/split-digits: 1000.0" in lines


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
