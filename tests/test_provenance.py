"""What a result records beyond its settings (clbench._core.provenance), checked against values computed another way."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import numpy as np

from clbench import testing
from clbench._core import provenance
from clbench._core.cells import cell_from_result


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_reading_records_the_files_this_thread_opens_for_reading_only(tmp_path):
    arrays, text, written, elsewhere = (tmp_path / n for n in ("x.npy", "y.json", "out.txt", "other.json"))
    np.save(arrays, np.arange(3))
    text.write_text("[1]")
    elsewhere.write_text("[2]")
    with provenance.reading() as opened:
        np.load(arrays)
        json.loads(text.read_text())
        written.write_text("not data")  # a write is not something the stream read
        thread = threading.Thread(target=elsewhere.read_text)
        thread.start()
        thread.join()
    assert provenance.data_files(opened) == sorted([arrays.resolve(), text.resolve()])


def test_what_an_import_reads_and_the_kernels_pseudo_files_are_not_data(tmp_path, monkeypatch):
    """A library a stream's loader imports lazily reads as it loads (scikit-learn's import reads /proc/stat, a time
    zone, its own resources): not the cell's data. /proc/stat is never the same twice: recorded, it made the same
    command's second run find its own cells "made by other data" and refuse them."""
    import sys

    table = tmp_path / "table.csv"
    table.write_text("1,2\n")
    (tmp_path / "reads_at_import.py").write_text(f"DATA = open({str(table)!r}).read()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "reads_at_import", raising=False)
    with provenance.reading() as opened:
        import reads_at_import  # noqa: F401
    assert str(table) not in opened
    with provenance.reading() as opened:
        table.read_text()
    assert str(table) in opened
    assert provenance.data_files({"/proc/stat", "/proc/self/status", str(table)}) == [table.resolve()]


def test_nested_reading_blocks_both_see_the_inner_files(tmp_path):
    (tmp_path / "a").write_text("a")
    with provenance.reading() as outer:
        with provenance.reading() as inner:
            (tmp_path / "a").read_text()
    assert inner == outer == {str(tmp_path / "a")}


def test_file_digest_is_the_sha256_and_follows_an_edit(tmp_path):
    path = tmp_path / "d.bin"
    path.write_bytes(b"one")
    assert provenance.file_digest(path) == _sha(b"one")
    path.write_bytes(b"two!")  # another size: another cache key
    assert provenance.file_digest(path) == _sha(b"two!")


def test_data_keys_name_package_files_relative_to_their_package_and_find_them_again(tmp_path):
    regs = testing.registry()
    [result] = testing.run(regs, tmp_path / "out", "seqft", stream="split-digits", profile="quick", orders=["1"],
                           sets={"train.epochs": [1]})
    cell = cell_from_result(regs, result, tmp_path / "out")
    data = result.provenance["data"]
    assert data and all(key.startswith("pkg:") for key in data), data
    for key, digest in data.items():
        path = provenance.locate(key, cell, "data_dir")
        assert path is not None and _sha(path.read_bytes()) == digest
    assert provenance.changes(result.provenance, result.metrics, regs, cell) == []


def test_source_digest_of_a_package_plugin_hashes_every_module_of_its_folder_then_the_shared_ones_it_imports():
    import clbench_plugins.ewc.plugin as ewc

    folder = Path(ewc.__file__).parent
    root = folder.parent  # clbench_plugins
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + _sha(f.read_bytes()).encode() + b"\n")
    # method.py imports clbench_plugins._shared.params and .penalty, plugin.py ._shared.tuned (code) and
    # ._shared.table1_presets (the paper profiles' presets, from ._shared.lora.presets: settings, not hashed); the
    # packages' __init__ run on the way (not ``_shared/lora``'s: only settings are imported from it)
    for rel in ("_shared/__init__.py", "_shared/params.py", "_shared/penalty.py", "_shared/tuned/__init__.py"):
        h.update(f"clbench_plugins/{rel}".encode() + b"\0" + _sha((root / rel).read_bytes()).encode() + b"\n")
    assert provenance.source_digest(ewc) == h.hexdigest()


def _fake_package(root: Path) -> dict[str, Path]:
    """A top-level package ``sharedpkg`` with two plugins and shared code: ``alpha`` imports ``common`` (at module
    level), which imports ``.deep`` relatively, and ``late`` inside a function; ``beta`` and ``unused`` are not
    alpha's."""
    files = {
        "__init__.py": "",
        "alpha/__init__.py": "",
        "alpha/plugin.py": "from sharedpkg.shared.common import helper\nfrom sharedpkg.shared.code_presets import scaled\n"
                           "from .presets import QUICK\n\n\ndef later():\n"
                           "    from sharedpkg.shared import late\n    return late\n",
        "beta/__init__.py": "",
        "beta/plugin.py": "VALUE = 1\n",
        "shared/__init__.py": "",
        "shared/common.py": "from .deep import depth\n\n\ndef helper():\n    return depth()\n",
        "shared/deep.py": "def depth():\n    return 1\n",
        "shared/late.py": "LATE = 1\n",
        "shared/unused.py": "UNUSED = 1\n",
        # settings: alpha's own presets module and a shared one, data only; and one that defines code
        "alpha/presets.py": '"""Presets of alpha."""\n\nfrom sharedpkg.shared.base_presets import BASE\n\n'
                            'QUICK = {**BASE, "lr": 0.1}\n',
        "shared/base_presets.py": 'from typing import Any\n\nBASE: dict[str, Any] = dict(epochs=1)\n',
        "shared/code_presets.py": "def scaled(lr):\n    return {'lr': lr * 2}\n",
    }
    paths = {}
    for rel, text in files.items():
        path = root / "sharedpkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths[rel] = path
    return paths


def test_a_plugins_digest_follows_the_shared_modules_it_imports_and_no_others(tmp_path, monkeypatch):
    """Shared code (``clbench_plugins._shared``) changes what a plugin computes without a change in its folder:
    the digest covers every module of its top-level package that its files import, transitively, relative and
    function-level imports included, and nothing else; presets modules that hold data only are settings, not
    code."""
    import importlib
    import sys

    paths = _fake_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        alpha = importlib.import_module("sharedpkg.alpha.plugin")
        before = provenance.source_digest(alpha)
        for rel, changes in [("shared/unused.py", False), ("beta/plugin.py", False), ("__init__.py", False),
                             ("shared/common.py", True), ("shared/deep.py", True), ("shared/late.py", True),
                             ("shared/__init__.py", True), ("alpha/plugin.py", True),
                             # presets are settings (every cell's configuration holds them), not code: a presets
                             # module that defines a function is code all the same
                             ("alpha/presets.py", False), ("shared/base_presets.py", False),
                             ("shared/code_presets.py", True)]:
            paths[rel].write_text(paths[rel].read_text() + "# an edit\n")  # a longer file: a new (size, mtime) key
            now = provenance.source_digest(alpha)
            assert (now != before) is changes, rel
            before = now
    finally:
        for name in [m for m in sys.modules if m == "sharedpkg" or m.startswith("sharedpkg.")]:
            del sys.modules[name]


def test_differences_name_versions_code_and_data():
    old = {"versions": {"clbench": "0.1.0"}, "code": {"method:ewc": "a", "model:mlp": "m"}, "data": {"pkg:x/d": "1"}}
    new = {"versions": {"clbench": "0.2.0"}, "code": {"method:ewc": "b", "model:mlp": "m"}, "data": {"pkg:x/d": "2"}}
    assert provenance.differences(old, new) == ["version of clbench", "code of method ewc", "data file pkg:x/d"]
    assert provenance.differences(old, old) == []
    assert provenance.differences(None, new) == []  # a result written before provenance was recorded


def test_a_stream_served_from_its_plugins_cache_records_the_files_of_the_first_load(tmp_path):
    """The digits streams share one in-process copy of the data: the second stream to load opens no file."""
    regs = testing.registry()
    [first] = testing.run(regs, tmp_path / "a", "seqft", stream="split-digits", profile="quick", orders=["1"],
                          sets={"train.epochs": [1]})
    [second] = testing.run(regs, tmp_path / "b", "seqft", stream="permuted-digits", profile="quick", orders=["1"],
                           sets={"train.epochs": [1], "stream.tasks": [2]})
    assert first.provenance["data"] and second.provenance["data"] == first.provenance["data"]


def test_settings_only_accepts_assignments_and_refuses_code_or_other_names(tmp_path):
    cases = {
        "presets.py": ('"""doc"""\nfrom typing import Any\n\nA: dict[str, Any] = {"x": 1}\nB = {**A, "y": dict(z=2)}\n', True),
        "lora_presets.py": ("A = 1\n", True),
        "presets_extra.py": ("A = 1\n", False),  # not a presets module by name
        "config.py": ("A = 1\n", False),
        "defs_presets.py": ("def f():\n    return 1\n", False),
        "branch_presets.py": ("import os\nif os.name:\n    A = 1\n", False),
        "class_presets.py": ("class A:\n    pass\n", False),
        "broken_presets.py": ("A = (\n", False),
    }
    for name, (text, expected) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        assert provenance.settings_only(path) is expected, name


def test_every_builtin_presets_module_is_settings_only():
    """A built-in presets module that grew code would silently count in its plugins' digests again."""
    import clbench_plugins

    root = Path(next(iter(clbench_plugins.__path__)))
    found = sorted(p for p in root.rglob("*.py") if p.stem == "presets" or p.stem.endswith("_presets"))
    assert len(found) >= 9
    assert [p for p in found if not provenance.settings_only(p)] == []
