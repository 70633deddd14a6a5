"""Discovery: entry points, third-party distributions, disabling, and errors that name the culprit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

import pytest

from clbench import testing
from clbench._core.plan import RunRequest, make_plan
from clbench._exec.local import harness_registry
from clbench.errors import ConfigError, PluginError, UnknownNameError
from clbench.hookspecs import hookimpl
from clbench.model import StreamInfo
from clbench.specs import MethodSpec, ModelSpec


def test_builtins_come_through_the_entry_point_group():
    regs = harness_registry()
    assert {"seqft", "ewc", "lwf", "replay", "joint"} <= set(regs.methods)
    assert regs.methods.origins["ewc"].dist == "clbench"
    assert regs.methods.origins["ewc"].plugin == "ewc"


def test_autoload_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("CLBENCH_DISABLE_PLUGIN_AUTOLOAD", "1")
    regs = harness_registry()
    assert len(regs.methods) == 0 and "local" in regs.executors  # core plugins stay


def test_one_plugin_can_be_disabled():
    regs = harness_registry(disabled=["ewc"])
    assert "ewc" not in regs.methods and "seqft" in regs.methods


def test_unknown_name_suggests_and_lists():
    regs = harness_registry()
    with pytest.raises(UnknownNameError) as err:
        regs.methods.get("ewcc")
    msg = str(err.value)
    assert "unknown method 'ewcc'" in msg and "did you mean 'ewc'" in msg and "seqft" in msg


def test_duplicate_names_are_an_error_naming_both():
    class Dup:
        @hookimpl
        def clbench_add_methods(self):
            return [MethodSpec("ewc", object)]

    with pytest.raises(PluginError, match="registered twice"):
        testing.registry(Dup())


def test_wrong_return_type_names_the_plugin():
    class Wrong:
        @hookimpl
        def clbench_add_methods(self):
            return ["ewc"]

    with pytest.raises(PluginError, match="returned str, expected MethodSpec"):
        testing.registry(Wrong())


def test_misspelled_hook_fails_at_startup():
    class Typo:
        @hookimpl
        def clbench_add_method(self):  # missing "s"
            return []

    with pytest.raises(PluginError, match="unknown hook"):
        testing.registry(Typo())


def _write_distribution(root, name, module_source, ep_value):
    (root / f"{name}.py").write_text(textwrap.dedent(module_source))
    info = root / f"{name}-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text(f"[clbench]\n{name} = {ep_value}\n")


THIRD_PARTY = """
    from dataclasses import dataclass
    from clbench import hookimpl
    from clbench.method import Method
    from clbench.specs import MethodSpec, ModelSpec

    @dataclass(frozen=True)
    class Config:
        shrink: float = 0.5

    class Shrink(Method):
        def after_task(self, task, index):
            for p in self.model.parameters():
                p.data.mul_(self.config.shrink)

    @hookimpl
    def clbench_add_methods():
        return [MethodSpec("shrink", Shrink, Config, "a third-party method")]
"""


def _clbench(args, tmp_path, extra_path):
    env = {"PYTHONPATH": str(extra_path), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "clbench", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)


@pytest.mark.slow
def test_third_party_distribution_is_listed_and_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _write_distribution(site, "clbench_shrink", THIRD_PARTY, "clbench_shrink")
    out = _clbench(["list", "methods"], tmp_path, site)
    assert out.returncode == 0, out.stderr
    assert "shrink" in out.stdout and "clbench-shrink 0.3" in out.stdout
    out = _clbench(["run", "--methods", "shrink", "--stream", "split-digits", "--orders", "1", "--set",
                    "shrink.shrink=0.9", "--set", "train.epochs=1", "--no-progress", "--out", "r"], tmp_path, site)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r" / "split-digits" / "shrink" / "order-1" / "seed-0" / "result.json").exists()


@pytest.mark.slow
def test_plugin_failing_at_import_is_skipped_with_a_warning_naming_its_distribution(tmp_path):
    # It used to stop every command (exit 2); a command that does not need it now goes on, warned in one line
    # that says how to disable or remove it (tests/faultsuite.py: broken-plugin-*)
    site = tmp_path / "site"
    site.mkdir()
    _write_distribution(site, "clbench_broken", "raise ImportError('no module named foo')\n", "clbench_broken")
    out = _clbench(["list", "methods"], tmp_path, site)
    assert out.returncode == 0 and "seqft" in out.stdout, out.stderr
    warning = [line for line in out.stderr.splitlines() if "failed to import" in line]
    assert warning == ["warning: plugin 'clbench_broken' from distribution 'clbench-broken' failed to import "
                       "(clbench_broken): ImportError: no module named foo; skipped. Disable it with "
                       "-p no:clbench_broken, or remove it with `pip uninstall clbench-broken`"], out.stderr
    assert "Traceback" not in out.stderr
    # and it can be switched off by name, silently
    out = _clbench(["-p", "no:clbench_broken", "list", "methods"], tmp_path, site)
    assert out.returncode == 0 and "seqft" in out.stdout and "failed to import" not in out.stderr


def _import_graph():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "import_graph.py"
    spec = importlib.util.spec_from_file_location("import_graph", path)
    assert spec is not None and spec.loader is not None
    ig = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ig)
    return ig


def test_the_core_is_layers_without_a_circle_or_an_upward_import():
    """scripts/import_graph.py counts module-level, function-level, by-name (a module named in a string) and typing
    imports: no runtime import closes a circle, and no import of any kind goes up a layer (contract < _core < _exec
    < _tools < _cli < testing), so each module can be read knowing only the ones below it."""
    import networkx as nx

    ig = _import_graph()
    g = ig.graph()
    kinds = {k for *_, k in g.edges(data="kind")}
    assert {"module", "function", "by-name", "typing"} <= kinds  # the parser sees every kind it counts
    # the lazy exports of clbench/__init__ are by-name edges; the testing kit is a layer of its own, on top
    assert ("clbench", "clbench.method", "by-name") in {(a, b, k) for a, b, k in g.edges(data="kind")}
    assert [ig.layer(m) for m in ("clbench", "clbench.method", "clbench._core.plan", "clbench._exec.runner",
                                  "clbench._tools.verify", "clbench._cli.main", "clbench.leaderboard",
                                  "clbench.testing", "clbench.testing.tiny")] == [0, 0, 1, 2, 3, 4, 4, 5, 5]
    assert set(map(ig.layer, g.nodes)) == {0, 1, 2, 3, 4, 5}
    assert ("clbench.testing.model_checks", "clbench._exec.session", "module") in set(g.edges(data="kind"))
    # the check itself catches an upward edge and a circle
    fake = nx.MultiDiGraph([("clbench.method", "clbench._exec.runner", {"kind": "typing"}),
                            ("clbench._core.plan", "clbench._core.results", {"kind": "function"}),
                            ("clbench._core.results", "clbench._core.plan", {"kind": "module"}),
                            ("clbench._cli.main", "clbench.testing.tiny", {"kind": "function"})])
    assert ig.upward(fake) == [("clbench._cli.main", "clbench.testing.tiny", "function"),
                               ("clbench.method", "clbench._exec.runner", "typing")]
    assert ig.circles(fake, ig.RUNTIME) == [["clbench._core.plan", "clbench._core.results"]]
    assert ig.circles(g, ig.RUNTIME) == []
    assert ig.upward(g) == []


def test_built_in_plugins_and_the_guide_import_only_the_public_api():
    """The built-ins enter through the same door as a third party's plugin: they import ``clbench`` and its contract
    modules, never the harness below them (``clbench._core`` and the like), and so does every example of the guide
    and the README."""
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted((root / "plugins").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names if n.startswith("clbench._")]
    for doc in ("docs/plugins.md", "README.md"):
        text = (root / doc).read_text(encoding="utf-8")
        found += [f"{doc}: {m}" for m in re.findall(r"^\s*(?:from|import) (clbench\._\S*)", text, flags=re.M)]
    assert found == []
    import clbench

    for name in clbench.__all__:  # every public name resolves (lazily) from the package itself
        assert getattr(clbench, name) is not None, name


def test_built_in_plugins_import_no_other_plugins_code_only_the_shared_package():
    """A built-in plugin imports its own modules and ``clbench_plugins._shared`` (code several of them run, which is
    no plugin: it registers nothing), never another plugin's. So an error in shared code is blamed on the plugin
    that runs it (``clbench._core.boundary.blame``), and the shared code counts in the code digest of every plugin
    that imports it (``clbench._core.provenance.source_digest``). ``_shared`` imports no plugin."""
    import ast
    import importlib.metadata as md
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "plugins"
    found = []
    for path in sorted(root.rglob("*.py")):
        package = ["clbench_plugins", *path.relative_to(root).parent.parts]
        own = package[1] if len(package) > 1 else ""
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) + 1 - node.level] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                names = [f"{module}.{a.name}" for a in node.names] if module == "clbench_plugins" else [module]
            else:
                continue
            found += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names
                      if n.startswith("clbench_plugins.") and n.split(".")[1] not in (own, "_shared")]
    assert found == []
    entry_points = {ep.name: ep.value for ep in md.entry_points(group="clbench")}
    assert "lora" not in entry_points  # the LoRA machinery is clbench_plugins._shared.lora now, no plugin
    assert not [v for v in entry_points.values() if v.startswith("clbench_plugins._shared")]


def test_an_error_in_shared_code_is_blamed_on_the_plugin_that_runs_it():
    """Code in ``clbench_plugins._shared`` belongs to no plugin: an error there names the plugin whose object runs
    it (a method inheriting it: no frame of the plugin's own folder is in the traceback), at the shared line, or the
    plugin whose code called it; with neither it is not pinned on some other plugin."""
    from clbench_plugins._shared.lora.method import task_value
    from clbench_plugins._shared.lora.sequential import SeqLoRA
    from clbench_plugins._shared.masked.method import ExpanderEWC
    from clbench_plugins.mtl.method import MTL
    from clbench_plugins.nlora.method import NLoRA
    from clbench_plugins.pertask.masked import PerTaskMasked

    from clbench._core.boundary import blame

    regs = harness_registry()

    def where(call):
        with pytest.raises(AttributeError) as err:  # a method that was never set up has no adapters, no model
            call()
        return blame(err.value, regs)

    cases = {"nlora": (NLoRA, "before_task", "_shared/lora/method.py"),  # LoRAMethod's own code, inherited
             "mtl": (MTL, "before_task", "_shared/lora/method.py"),  # mtl's class on seqlora's shared one
             "seqlora": (SeqLoRA, "before_task", "_shared/lora/method.py"),  # a shared class seqlora registers
             "expander_ewc": (ExpanderEWC, "footprint", "_shared/masked/method.py"),
             "pertask": (PerTaskMasked, "footprint", "_shared/masked/method.py")}  # a subclass in pertask
    for plugin, (cls, hook, file) in cases.items():
        said = where(lambda cls=cls, hook=hook: getattr(cls.__new__(cls), hook)("t", 0))
        assert said.startswith(f" in plugin {plugin!r} (clbench ") and f"{file}:" in said, said
    # shared code called by the plugin's own code: that plugin, at the shared line
    nlora = NLoRA.__new__(NLoRA)
    nlora.config = type("Config", (), {"penalty": "code", "lambda_": 1.0, "lambda_per_task": None})()
    said = where(lambda: nlora.loss_terms(type("Batch", (), {"task": "t"})(), None))  # task_value reads None.get
    assert said.startswith(" in plugin 'nlora' (clbench ") and "_shared/lora/method.py:" in said, said
    assert where(lambda: task_value(1.0, None, "t")) == ""  # called by no plugin: clbench's, not 'lora' or another


def test_every_script_benchmark_and_doc_generator_parses():
    """No test imports benchmarks/, scripts/ or docs/*.py (they run on GPUs or for minutes): at least they parse. A
    committed benchmark once lost its docstring's closing quotes."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = sorted([*root.glob("benchmarks/*.py"), *root.glob("scripts/*.py"), *root.glob("docs/*.py")])
    assert len(files) > 10
    for path in files:
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path))  # raises SyntaxError, naming the file


@dataclass(frozen=True)
class _RenamedConfig:
    checkpoint: str = "hub/name"
    per_task: bool | None = None
    hidden: tuple[int, ...] = (8,)


class _RenamedFields:
    """A model whose weights and heads settings are not called name_or_path and multi_head: its spec says so."""

    @hookimpl
    def clbench_add_models(self) -> list[ModelSpec]:
        from clbench_plugins.mlp.model import MLPConfig
        from clbench_plugins.mlp.model import build as build_mlp

        def build(cfg: _RenamedConfig, info: StreamInfo) -> Any:  # the core resolved the heads into ``info``
            return build_mlp(MLPConfig(hidden=cfg.hidden), info)

        return [ModelSpec("renamed", build, _RenamedConfig, weights_field="checkpoint", heads_field="per_task")]


def test_the_planner_sets_and_checks_the_fields_a_model_spec_declares(tmp_path):
    regs = testing.registry(_RenamedFields())

    def plan(**changes: Any) -> Any:
        req = RunRequest(profile=testing.TEST_PROFILE, methods="seqft", streams=["tiny-vector"], out=tmp_path,
                         model="renamed", **changes)
        return make_plan(regs, req).cells

    [cell] = plan(model_path="/weights/here")
    assert cell.model_config["checkpoint"] == "/weights/here"  # --model-path set the declared field
    # the stream has one head per task: a heads setting of one shared head would change its scenario
    with pytest.raises(ConfigError, match=r"model\.per_task=false on stream 'tiny-vector'"):
        plan(sets={"model.per_task": [False]})
    with pytest.raises(ConfigError, match="--data-dir /data: no planned stream reads a data directory"):
        plan(data_dir="/data")  # tiny-vector's config has no data_dir field


def test_loading_every_plugin_imports_no_optional_or_heavy_library():
    """`clbench run` builds the whole registry before planning: the libraries only some plugins use (scikit-learn
    and scipy for GLUE's scores, transformers and peft for the hub models, pandas for tables, tensorboard, timm,
    datasets, networkx) load when those plugins work, not when every command starts (a fresh interpreter)."""
    code = ("import sys; from clbench._exec.local import harness_registry; harness_registry(); "
            "print(sorted(m for m in ('sklearn', 'scipy.stats', 'pandas', 'transformers', 'peft', 'tensorboard', "
            "'timm', 'datasets', 'networkx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
