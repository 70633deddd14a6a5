"""Discovery: entry points, third-party distributions, disabling, and errors that name the culprit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from clbench import testing
from clbench.errors import PluginError, UnknownNameError
from clbench.hookspecs import hookimpl
from clbench.registry import build_registry
from clbench.specs import MethodSpec


def test_builtins_come_through_the_entry_point_group():
    regs = build_registry()
    assert {"seqft", "ewc", "lwf", "replay", "joint"} <= set(regs.methods)
    assert regs.methods.origins["ewc"].dist == "clbench"
    assert regs.methods.origins["ewc"].plugin == "ewc"


def test_autoload_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("CLBENCH_DISABLE_PLUGIN_AUTOLOAD", "1")
    regs = build_registry()
    assert len(regs.methods) == 0 and "local" in regs.executors  # core plugins stay


def test_one_plugin_can_be_disabled():
    regs = build_registry(disabled=["ewc"])
    assert "ewc" not in regs.methods and "seqft" in regs.methods


def test_unknown_name_suggests_and_lists():
    regs = build_registry()
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
    from clbench.specs import MethodSpec

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
    return subprocess.run([sys.executable, "-m", "clbench.cli", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)


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


def test_plugin_failing_at_import_names_its_distribution(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _write_distribution(site, "clbench_broken", "raise ImportError('no module named foo')\n", "clbench_broken")
    out = _clbench(["list"], tmp_path, site)
    assert out.returncode == 2
    assert "clbench-broken" in out.stderr and "failed to import" in out.stderr
    assert "Traceback" not in out.stderr
    # and it can be switched off by name
    out = _clbench(["-p", "no:clbench_broken", "list", "methods"], tmp_path, site)
    assert out.returncode == 0 and "seqft" in out.stdout


def test_the_core_has_no_runtime_import_circle():
    """scripts/import_graph.py counts module-level, function-level and by-name imports (a module named in a string,
    as CORE_PLUGINS): none may close a circle, so each module can be read knowing only the ones below it."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "import_graph.py"
    spec = importlib.util.spec_from_file_location("import_graph", path)
    assert spec is not None and spec.loader is not None
    ig = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ig)
    g = ig.graph()
    kinds = {k for *_, k in g.edges(data="kind")}
    assert {"module", "function", "by-name"} <= kinds  # the parser sees every kind it counts
    assert ("clbench.registry", "clbench.local") in {(a, b) for a, b, k in g.edges(data="kind") if k == "by-name"}
    assert ig.circles(g, ig.RUNTIME) == []
