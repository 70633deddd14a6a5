"""Declared capabilities (`clbench_add_capabilities`): what a method takes and needs and what a model provides,
checked when the plan is made, so a pairing that cannot run is named before any cell starts; given apart from the
specs by a plugin, as memory and sharding are."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from torch import nn

from clbench import testing
from clbench._core.plan import RunRequest, make_plan
from clbench.errors import ConfigError, PluginError
from clbench.hookspecs import hookimpl
from clbench.model import HeadedModel, StreamInfo
from clbench.specs import CapabilitySpec, MethodSpec, ModelSpec


class _Declares:
    def __init__(self, *specs):
        self.specs = specs

    @hookimpl
    def clbench_add_capabilities(self):
        return list(self.specs)


@dataclasses.dataclass(frozen=True)
class _FlatConfig:
    hidden: tuple[int, ...] = ()  # (the tiny streams' test preset sets it; unused)


class _FlatModel:
    """A vector model that provides nothing beyond the defaults (no backbone declared)."""

    @hookimpl
    def clbench_add_models(self):
        def build(config, info: StreamInfo):
            return HeadedModel(nn.Flatten(), math.prod(info.input_shape), info)

        return [ModelSpec("flat", build, _FlatConfig, "a head on the inputs (tests only)")]


def _plan(regs, tmp_path: Path, method: str, stream: str, model: str | None = None):
    return make_plan(regs, RunRequest(profile="test", methods=method, streams=[stream], seeds=[0], model=model,
                                      out=tmp_path))


@pytest.fixture(scope="module")
def regs():
    return testing.registry()


@pytest.mark.parametrize("method", ["der", "derpp", "er-ace", "dgr"])
def test_a_method_that_stores_or_generates_inputs_is_refused_on_text_when_the_plan_is_made(regs, tmp_path, method):
    """The built-in declarations refuse the pairing while planning; without them the plan is made and the method's
    own setup would refuse it once the cell starts (what the declaration moves forward)."""
    with pytest.raises(ConfigError, match=f"method {method!r} cannot run on stream 'tiny-text': takes image or vector "
                                          "inputs; 'tiny-text' gives text"):
        _plan(regs, tmp_path, method, "tiny-text")
    bare = testing.registry(disabled=["capabilities"])
    assert bare.methods.get(method).modalities == frozenset()
    assert len(_plan(bare, tmp_path, method, "tiny-text").cells) == 1
    assert len(_plan(regs, tmp_path, method, "tiny-vector").cells) == 1  # (vectors it takes)


def test_a_method_that_needs_a_backbone_is_refused_on_a_model_without_one(tmp_path):
    regs = testing.registry(_FlatModel())
    with pytest.raises(ConfigError, match="'icarl' cannot run on stream 'tiny-cil': needs a model with "
                                          r"\['backbone'\]; 'flat' provides none"):
        _plan(regs, tmp_path, "icarl", "tiny-cil", model="flat")
    assert len(_plan(regs, tmp_path, "icarl", "tiny-cil", model="mlp").cells) == 1
    assert len(_plan(regs, tmp_path, "seqft", "tiny-cil", model="flat").cells) == 1  # (seqft needs nothing)


def test_declarations_add_to_a_specs_own():
    regs = testing.registry()
    assert regs.models.get("mlp").provides == {"multi-head", "backbone"}  # its own, and the declared one
    assert regs.methods.get("icarl").requires == {"backbone"}
    assert regs.methods.get("icarl").modalities == {"vector", "image"}
    assert regs.methods.get("replay").modalities == frozenset()  # (undeclared: any)


class _TextOnly:
    @hookimpl
    def clbench_add_methods(self):
        seqft = testing.registry().methods.get("seqft")
        return [dataclasses.replace(seqft, name="text-only", modalities=frozenset({"text"}), presets={})]


def test_a_methods_own_modalities_are_checked_and_the_kit_picks_a_stream_it_takes(tmp_path):
    regs = testing.registry(_TextOnly())
    with pytest.raises(ConfigError, match="takes text inputs; 'tiny-vector' gives vector"):
        _plan(regs, tmp_path, "text-only", "tiny-vector")
    assert testing.running.fitting_stream(regs, "text-only") == "tiny-text"


@pytest.mark.parametrize(("spec", "message"), [
    (CapabilitySpec("method", "replya", modalities=frozenset({"vector"})), "no plugin registers — did you mean "
                                                                           "'replay'"),
    (CapabilitySpec("model", "t5", requires=frozenset({"x"})), "gives model 't5' requires, which a model has not"),
    (CapabilitySpec("method", "seqft", provides=frozenset({"x"})), "which a method has not"),
    (CapabilitySpec("method", "der", modalities=frozenset({"vector"})), "capability 'method:der' is registered "
                                                                        "twice"),
])
def test_a_declaration_that_names_nothing_real_is_refused(spec, message):
    with pytest.raises(PluginError, match=message):
        testing.registry(_Declares(spec))


def test_a_method_declares_its_modalities_in_one_place():
    class Own:
        @hookimpl
        def clbench_add_methods(self):
            return [MethodSpec("own", testing.registry().methods.get("seqft").factory,
                               modalities=frozenset({"vector"}))]

    with pytest.raises(PluginError, match="method 'own' has modalities of its own .* give them in one place"):
        testing.registry(Own(), _Declares(CapabilitySpec("method", "own", modalities=frozenset({"image"}))))
