"""docs/plugins.md cannot rot: its code blocks are a third-party distribution, built, installed and run.

Every fenced block of the guide is one of:

* ```` ```python file=PATH ```` / ```` ```toml file=pyproject.toml ````: a file of the example package
  (blocks naming the same file are joined in order);
* ```` ```bash ````: commands, run in order from the package's folder: ``pip install -e .`` (the package is
  built into a wheel with pip and that wheel is unpacked onto a temporary ``sys.path`` entry: an installed
  distribution as ``importlib.metadata`` finds it, without touching site-packages), ``pytest tests/`` (the
  package's own tests, called in-process) and ``clbench ...`` (``clbench._cli.main.main`` in-process; exit 0);
* ```` ```text output="COMMAND" ```` (stdout of that command, exactly) or ```` ```text output-lines="COMMAND" ````
  (each line appears in it), or a plain ```` ```text ```` diagram, which is not code.

Anything else fails the test, so a new kind of block has to be taught here before the guide can hold it.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from clbench import testing
from clbench._cli import main as clbench_cli
from clbench._cli.commands import list as clbench_list
from clbench._core.registry import ENTRY_POINT_GROUP

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
COMMANDS = ("pip install -e .", "pytest tests/", "clbench ")
CHECKS = {"methods": "check_method", "streams": "check_stream", "models": "check_model", "metrics": "check_metric"}


@dataclass
class Block:
    lang: str
    attrs: dict[str, str]
    text: str
    line: int

    @property
    def where(self) -> str:
        return f"docs/plugins.md:{self.line}"


@dataclass
class Guide:
    files: dict[str, str] = field(default_factory=dict)  # path in the package -> text
    commands: list[tuple[str, Block]] = field(default_factory=list)
    outputs: list[Block] = field(default_factory=list)  # text blocks with output= or output-lines=

    @property
    def project(self) -> dict[str, Any]:
        return tomllib.loads(self.files["pyproject.toml"])

    @property
    def entry_points(self) -> dict[str, str]:
        return dict(self.project["project"]["entry-points"][ENTRY_POINT_GROUP])

    @property
    def dist(self) -> str:
        return self.project["project"]["name"]

    @property
    def version(self) -> str:
        return self.project["project"]["version"]


def parse(text: str) -> Guide:
    guide = Guide()
    for m in FENCE.finditer(text):
        info = shlex.split(m.group(1).strip())
        block = Block(info[0] if info else "", dict(a.split("=", 1) for a in info[1:] if "=" in a), m.group(2),
                      text.count("\n", 0, m.start()) + 1)
        if block.lang in ("python", "toml"):
            path = block.attrs.get("file")
            assert path, f"{block.where}: a {block.lang} block needs file=PATH (the example package's file it is)"
            assert not Path(path).is_absolute() and ".." not in Path(path).parts, f"{block.where}: {path}"
            assert block.lang == "python" or path == "pyproject.toml", f"{block.where}: a toml block is pyproject.toml"
            guide.files[path] = guide.files.get(path, "") + block.text
        elif block.lang == "bash":
            for line in block.text.splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                assert line.startswith(COMMANDS) and (line.startswith("clbench ") or line in COMMANDS), (
                    f"{block.where}: the test does not know how to run {line!r}; commands it runs: {COMMANDS}")
                guide.commands.append((line, block))
        elif block.lang == "text":
            if "output" in block.attrs or "output-lines" in block.attrs:
                guide.outputs.append(block)
        else:
            raise AssertionError(f"{block.where}: a ```{block.lang} block; the test runs python, toml, bash and "
                                 "text blocks only")
    return guide


@pytest.fixture(scope="module")
def guide() -> Guide:
    return parse(GUIDE.read_text(encoding="utf-8"))


def test_every_block_is_part_of_the_example_package(guide):
    assert "pyproject.toml" in guide.files
    modules = {p[:-3] for p in guide.files if p.endswith(".py") and "/" not in p}
    listed = set(guide.project["tool"]["setuptools"]["py-modules"])
    assert listed == modules, f"[tool.setuptools] py-modules {sorted(listed)} are not the modules {sorted(modules)}"
    targets = {v.split(":")[0] for v in guide.entry_points.values()}
    assert targets == modules, f"entry points name {sorted(targets)}, the guide's modules are {sorted(modules)}"
    commands = [c for c, _ in guide.commands]
    assert commands[0] == "pip install -e .", "the first command installs the package"
    for block in guide.outputs:
        command = block.attrs.get("output") or block.attrs["output-lines"]
        assert command in commands, f"{block.where}: shows the output of {command!r}, which no bash block runs"


# ------------------------------------------------------------------------------------- install the package
@dataclass
class Installed:
    root: Path  # the package folder, as the guide's reader has it
    site: Path  # where the wheel was unpacked (on sys.path)
    modules: list[str]


def build_and_install(guide: Guide, tmp: Path) -> Installed:
    root = tmp / "clbench-rotations"
    for rel, text in guide.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    modules = [p[:-3] for p in guide.files if p.endswith(".py") and "/" not in p]
    site = tmp / "site"
    if importlib.util.find_spec("pip") is None or importlib.util.find_spec("setuptools") is None:
        _install_by_hand(guide, root, site, modules)  # no build tools here: the dist-info pip would write
        return Installed(root, site, modules)
    wheels = tmp / "wheels"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "--no-cache-dir", "-q", "-w", str(wheels), str(root)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, f"the guide's package does not build:\n{proc.stdout}\n{proc.stderr}"
    for leftover in ("build", *(p.name for p in root.glob("*.egg-info"))):  # setuptools' by-products
        shutil.rmtree(root / leftover, ignore_errors=True)
    [wheel] = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:  # what pip install does with a pure-Python wheel, minus scripts
        zf.extractall(site)
    return Installed(root, site, modules)


def _install_by_hand(guide: Guide, root: Path, site: Path, modules: list[str]) -> None:
    info = site / f"{guide.dist.replace('-', '_')}-{guide.version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {guide.dist}\nVersion: {guide.version}\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in guide.entry_points.items()))
    for name in modules:
        shutil.copy(root / f"{name}.py", site / f"{name}.py")


@pytest.fixture(scope="module")
def installed(guide, tmp_path_factory) -> Iterator[Installed]:
    pkg = build_and_install(guide, tmp_path_factory.mktemp("guide"))
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(pkg.site))  # also invalidates importlib's caches
        try:
            yield pkg
        finally:
            for name in pkg.modules:
                sys.modules.pop(name, None)
    importlib.invalidate_caches()


# ------------------------------------------------------------------------------------- run the commands
def run_clbench(command: str, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        clbench_cli.main(shlex.split(command)[1:])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out = capsys.readouterr()
    return code, out.out, out.err


def run_package_tests(pkg: Installed, tmp: Path, monkeypatch) -> set[tuple[str, str]]:
    """``pytest tests/``: every test function of the package's tests, called with a fresh ``tmp_path``; returns
    the (check, name) pairs of the clbench.testing checks they ran."""
    ran: set[tuple[str, str]] = set()
    for check in CHECKS.values():
        original = getattr(testing, check)

        def spy(regs, name, *args, _original=original, _check=check, **kwargs):
            ran.add((_check, name))
            return _original(regs, name, *args, **kwargs)

        monkeypatch.setattr(testing, check, spy)
    files = sorted((pkg.root / "tests").glob("test_*.py"))
    assert files, "the guide's package has no tests/test_*.py"
    for path in files:
        spec = importlib.util.spec_from_file_location(f"_plugin_guide_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        tests = [(n, f) for n, f in vars(module).items() if n.startswith("test_") and callable(f)]
        assert tests, f"{path.name} defines no test"
        for name, fn in tests:
            params = list(inspect.signature(fn).parameters)
            assert params in ([], ["tmp_path"]), f"{path.name}::{name} takes {params}; the guide's tests take tmp_path"
            where = tmp / path.stem / name
            where.mkdir(parents=True)
            fn(*([where] if params else []))
    return ran


@pytest.mark.slow
def test_the_guide_builds_installs_and_runs(guide, installed, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(installed.root)
    dist = md.distribution(guide.dist)
    assert dist.version == guide.version
    outputs: dict[str, str] = {}
    for command, block in guide.commands:
        if command == "pip install -e .":
            found = {ep.name: ep.value for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP}
            assert found == guide.entry_points, f"the installed distribution's entry points: {found}"
        elif command == "pytest tests/":
            ran = run_package_tests(installed, tmp_path / "pytest", monkeypatch)
            regs = testing.registry()
            mine = {(check, name) for kind, check in CHECKS.items() for name, origin in regs.kind(kind).origins.items()
                    if origin.dist == guide.dist}
            assert mine and mine <= ran, f"the guide's tests do not check {sorted(mine - ran)} with clbench.testing"
        else:
            code, out, err = run_clbench(command, capsys)
            assert code == 0, f"{block.where}: `{command}` exited {code}:\n{out}\n{err}"
            outputs[command] = out

    for block in guide.outputs:
        if "output" in block.attrs:
            got = outputs[block.attrs["output"]]
            assert [line.rstrip() for line in got.strip("\n").splitlines()] == \
                [line.rstrip() for line in block.text.strip("\n").splitlines()], \
                f"{block.where}: `{block.attrs['output']}` now prints:\n{got}"
        else:
            got = outputs[block.attrs["output-lines"]]
            lines = {line.rstrip() for line in got.splitlines()}
            missing = [line for line in block.text.splitlines() if line.rstrip() not in lines]
            assert not missing, f"{block.where}: `{block.attrs['output-lines']}` no longer prints {missing}"

    # `clbench list` names every plugin of the package that registers something it lists, and its distribution
    listing = outputs["clbench list"]
    regs = testing.registry()
    listed = {origin.plugin for kind in clbench_list.KINDS for origin in regs.kind(kind).origins.values()
              if origin.dist == guide.dist}
    assert listed
    for name in listed:
        assert f"(plugin {name}, {guide.dist} {guide.version})" in listing, f"`clbench list` does not show plugin {name}"

    # what §14 says the run leaves behind
    [run] = [c for c, _ in guide.commands if c.startswith("clbench run")]
    for method in ("my-si", "seqft"):
        cell = installed.root / "runs" / "rotated-digits" / method / "order-1" / "seed-0"
        result = json.loads((cell / "result.json").read_text())
        assert result["status"] == "complete", result["error"]
        assert result["env"]["plugins"]["my_si"] == f"{guide.dist} {guide.version}"
        assert result["metrics"]["worst"] is not None and result["metrics"]["drift"] is not None
        assert (cell / "footprints.safetensors").exists()
        lines = [json.loads(line) for line in (cell / "tasks.jsonl").read_text().splitlines()]
        assert [line["index"] for line in lines] == [0, 1, 2, 3]
        assert all(line["mean_logged_loss"] is not None for line in lines)
    si = json.loads((installed.root / "runs/rotated-digits/my-si/order-1/seed-0/result.json").read_text())
    assert si["config"]["methods"]["my-si"]["c"] == 1.0 and "omega_mean" in si["report"]
    code, _, err = run_clbench(run, capsys)  # "Run it again and both cells are reused"
    assert code == 0 and "2 cells: 2 complete" in err, err
    code, _, err = run_clbench(run + " --set my-si.c=3", capsys)  # "with --set my-si.c=3 it refuses"
    assert code == 2 and "methods.my-si.c: 1.0 → 3.0" in err, err
