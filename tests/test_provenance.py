"""What a result records beyond its settings (clbench._core.provenance), checked against values computed another way."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import numpy as np

from clbench import testing
from clbench._core import provenance
from clbench._core.plan import cell_from_result


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


def test_source_digest_of_a_package_plugin_hashes_every_module_of_its_folder():
    import clbench_plugins.ewc.plugin as ewc

    folder = Path(ewc.__file__).parent
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + _sha(f.read_bytes()).encode() + b"\n")
    assert provenance.source_digest(ewc) == h.hexdigest()


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
