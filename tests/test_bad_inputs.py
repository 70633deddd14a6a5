"""Bad inputs fail before any training, in one line naming what is wrong: out-of-range and non-finite
settings, data files that are not UTF-8 or that a symlink takes out of the data folder, unknown orders.

Everything here fails at planning time or in a loader called directly: no cell is trained.
"""

from __future__ import annotations

import json
import re
import typing
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from clbench_plugins._shared.cl_data import GROUPS, CLBenchmarkStream
from clbench_plugins._shared.cl_hub import ensure_tasks
from clbench_plugins.glue.streams import GlueConfig, GlueSparse
from clbench_plugins.vision_streams import loaders

from clbench import config as cfg
from clbench._cli.main import main
from clbench._exec.local import harness_registry
from clbench.data import read_records
from clbench.errors import ConfigError, DataError, UnknownNameError, plural_of

RUN = ["run", "--methods", "ewc", "--stream", "split-digits", "--orders", "1", "--seeds", "0", "--no-progress"]
NOT_UTF8 = b'["n\xe9gatif", "positive"]'  # latin-1 "é": a file saved in the wrong encoding
GOOD = [{"sentence": "a fine film", "label": "positive"}, {"sentence": "dull", "label": "negative"}]


def clbench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
        raise SystemExit(0)
    return exit_.value.code or 0, capsys.readouterr().err


def refused_at_plan_time(capsys, tmp_path: Path, *args: str) -> str:
    """Run the CLI; assert exit 2 with one line and no result folder; return that line."""
    code, err = clbench(capsys, *args, "--out", str(tmp_path / "runs"))
    assert code == 2, err
    assert err.startswith("error: ") and err.strip().count("\n") == 0, err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # refused before any cell started
    return err


# ------------------------------------------------------------------------------------ settings
@pytest.mark.parametrize(("setting", "needle"), [
    ("ewc.lambda=-5", "ewc.lambda=-5.0 is out of range: it must be >= 0"),  # trained with a negative penalty
    ("model.hidden=-5", "model.hidden=[-5] is out of range: every width must be >= 1"),  # failed in the cell
    ("train.epochs=0", "train.epochs=0 is out of range: it must be >= 1"),
    ("train.eval_limit=-5", "train.eval_limit=-5 is out of range: it must be >= 0"),
], ids=["negative-ewc-lambda", "negative-model-hidden", "zero-epochs", "negative-eval-limit"])
def test_out_of_range_setting_is_refused_naming_it(capsys, tmp_path, setting, needle):
    err = refused_at_plan_time(capsys, tmp_path, *RUN, "--set", setting)
    assert needle in err


@pytest.mark.parametrize(("setting", "name"), [
    ("train.lr=NaN", "train.lr"),
    ("train.lr=-Infinity", "train.lr"),
    ("ewc.lambda=1e400", "ewc.lambda"),  # parses as inf: no result file could hold it
], ids=["nan-lr", "minus-inf-lr", "overflowing-lambda"])
def test_non_finite_setting_is_refused_naming_it(capsys, tmp_path, setting, name):
    err = refused_at_plan_time(capsys, tmp_path, *RUN, "--set", setting)
    assert f"{name}=" in err and "finite" in err


def _sample_outside(bounds: dict[str, float], tp: typing.Any) -> typing.Any:
    """A value just outside one of ``bounds``, of the field's type."""
    key, bound = next(iter(bounds.items()))
    step = 1 if tp is int or typing.get_args(tp) and int in typing.get_args(tp) else 0.5
    return {"ge": bound - step, "gt": bound, "le": bound + step, "lt": bound}[key]


def test_every_declared_plugin_range_is_checked_and_every_default_and_preset_is_inside():
    """Each built-in method/model/stream config: defaults and presets pass; a value outside a declared range
    is a ConfigError naming ``scope.field``."""
    regs = harness_registry()
    declared = 0
    for kind, scope_of in (("methods", lambda n: n), ("models", lambda n: "model"), ("streams", lambda n: "stream")):
        for name in regs.kind(kind):
            spec = regs.kind(kind).get(name)
            cfg.apply(spec.config_cls, None, {}, scope_of(name))  # the defaults are inside their ranges
            hints = typing.get_type_hints(spec.config_cls)
            for f in fields(spec.config_cls):
                bounds = f.metadata.get("range")
                if not bounds:
                    continue
                declared += 1
                key = cfg.public_name(f.name)
                # `bounded` says "scope.key=value is out of range"; an older __post_init__ check may fire first
                with pytest.raises(ConfigError, match=rf"{scope_of(name)}\.{key}=\S+ is out of range|\b{key}\b"):
                    cfg.apply(spec.config_cls, None, {key: _sample_outside(bounds, hints[f.name])}, scope_of(name))
    assert declared >= 60
    # the presets of every method and stream still plan (a range must not reject a shipped value)
    for kind in ("methods", "streams"):
        for name in regs.kind(kind):
            spec = regs.kind(kind).get(name)
            for values in spec.presets.values():
                scoped = cfg.split_scoped(values)
                own = {k: v for k, v in scoped.get("", {}).items() if k not in ("model", "methods")}
                if kind == "methods":
                    cfg.apply(spec.config_cls, None, own, name)
                else:
                    cfg.apply(spec.config_cls, None, scoped.get("stream", {}), "stream")
                if "train" in scoped:
                    cfg.apply(cfg.TrainConfig, None, scoped["train"], "train")


# ------------------------------------------------------------------------------------ data files
def write_task(root: Path, task: str = "SST-2", labels: bytes = b'["negative", "positive"]', ext: str = "json") -> Path:
    folder = root / GROUPS[task] / task
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "labels.json").write_bytes(labels)
    for split in ("train", "test"):
        text = json.dumps(GOOD) if ext == "json" else "".join(json.dumps(r) + "\n" for r in GOOD)
        (folder / f"{split}.{ext}").write_text(text, encoding="utf-8")
    return folder


def test_non_utf8_labels_file_is_named_at_plan_time(capsys, tmp_path):
    root = tmp_path / "CL_Benchmark"
    for task in ("dbpedia", "amazon", "yahoo", "agnews"):
        write_task(root, task, labels=b'["positive", "negative"]')
    (root / "TC" / "dbpedia" / "labels.json").write_bytes(NOT_UTF8)  # was a raw UnicodeDecodeError traceback
    err = refused_at_plan_time(capsys, tmp_path, "run", "--methods", "seqft", "--stream", "standard", "--orders", "1",
                               "--seeds", "0", "--no-progress", "--data-dir", str(root))
    assert "dbpedia/labels.json: not UTF-8 text (byte 0xe9" in err


def test_non_utf8_data_files_are_data_errors_naming_the_file(tmp_path):
    folder = write_task(tmp_path)
    (folder / "train.json").write_bytes(b'[{"sentence": "caf\xe9", "label": "positive"}]')
    stream = CLBenchmarkStream("fab", tmp_path, ["SST-2"], {"x": ["SST-2"]})
    with pytest.raises(DataError, match=r"train\.json: not UTF-8 text \(byte 0xe9 at offset 18, line 1\)"):
        stream.data("SST-2")
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n')
    with pytest.raises(DataError, match=r"x\.jsonl: not UTF-8 text \(byte 0xff at offset 16, line 2\)"):
        read_records(jsonl)
    glue = tmp_path / "glue"
    (glue / "RTE").mkdir(parents=True)
    (glue / "RTE" / "train.tsv").write_bytes(b"index\tsentence1\tsentence2\tlabel\n0\tna\xefve\tb\tentailment\n")
    with pytest.raises(DataError, match=r"RTE/train\.tsv: not UTF-8 text"):
        GlueSparse(GlueConfig(data_dir=str(glue), tasks=("rte",))).data("rte")
    (tmp_path / "PROVENANCE.json").write_bytes(b'{"\xe9": {}}')
    with pytest.raises(DataError, match=r"PROVENANCE\.json: not UTF-8 text"):
        ensure_tasks(tmp_path, ["SST-2"], GROUPS)


def test_capability_chain_non_utf8_csv_and_symlinked_csv_are_refused(tmp_path):
    from clbench_plugins.capability_chain.streams import CapabilityChain, CapabilityConfig

    (tmp_path / "data" / "hex_phi").mkdir(parents=True)
    csv_file = tmp_path / "data" / "hex_phi" / "category_1.csv"
    csv_file.write_bytes(b"How do I make a weap\xf6n?\n")
    chain = CapabilityChain(CapabilityConfig(data_dir=str(tmp_path / "data")))
    with pytest.raises(DataError, match=r"category_1\.csv: not UTF-8 text"):
        chain.hex_phi_prompts(None)
    (tmp_path / "secret.csv").write_text("a prompt from outside the data folder\n")
    csv_file.unlink()
    csv_file.symlink_to(tmp_path / "secret.csv")
    with pytest.raises(DataError, match="outside the data directory"):
        chain.hex_phi_prompts(None)


@pytest.mark.parametrize("name", ["train.json", "labels.json"])
def test_symlinked_file_outside_the_data_folder_is_refused_at_plan_time(tmp_path, name):
    root = tmp_path / "data"
    folder = write_task(root)
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    outside.write_bytes((folder / name).read_bytes())
    (folder / name).unlink()
    (folder / name).symlink_to(outside)  # was read as if it were part of the data folder
    with pytest.raises(DataError, match=rf"{name} resolves to {re.escape(str(outside))}, outside the data directory"):
        CLBenchmarkStream("fab", root, ["SST-2"], {"x": ["SST-2"]})


def test_symlinked_file_inside_the_data_folder_is_still_read(tmp_path):
    folder = write_task(tmp_path, ext="jsonl")
    (tmp_path / "shared").mkdir()
    (folder / "train.jsonl").rename(tmp_path / "shared" / "train.jsonl")
    (folder / "train.jsonl").symlink_to(tmp_path / "shared" / "train.jsonl")
    stream = CLBenchmarkStream("fab", tmp_path, ["SST-2"], {"x": ["SST-2"]}, ext="jsonl")
    assert len(stream.data("SST-2").train) == 2


def test_symlinked_glue_and_image_files_outside_the_data_folder_are_refused(tmp_path):
    (tmp_path / "secret.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n")
    glue = tmp_path / "glue"
    (glue / "RTE").mkdir(parents=True)
    for split in ("train", "dev"):
        (glue / "RTE" / f"{split}.tsv").symlink_to(tmp_path / "secret.tsv")
    with pytest.raises(DataError, match="outside the data directory"):
        GlueSparse(GlueConfig(data_dir=str(glue), tasks=("rte",))).data("rte")

    cifar = tmp_path / "vision" / "cifar10" / "train"
    cifar.mkdir(parents=True)
    np.save(tmp_path / "X.npy", np.zeros((2, 32, 32, 3), dtype=np.uint8))
    np.save(cifar / "y.npy", np.zeros(2, dtype=np.int64))
    (cifar / "X.npy").symlink_to(tmp_path / "X.npy")
    with pytest.raises(DataError, match="outside the data directory"):
        loaders.cifar_from_dir(tmp_path / "vision" / "cifar10", "train", root=tmp_path / "vision")
    (cifar / "X.npy").unlink()
    np.save(cifar / "X.npy", np.zeros((2, 32, 32, 3), dtype=np.uint8))
    (cifar / "y.npy").unlink()
    with pytest.raises(DataError, match=r"y\.npy is missing"):
        loaders.cifar_from_dir(tmp_path / "vision" / "cifar10", "train", root=tmp_path / "vision")

    mnist = tmp_path / "mnist"
    mnist.mkdir()
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x00")
    (mnist / "t10k-images-idx3-ubyte").symlink_to(tmp_path / "t10k-images-idx3-ubyte")
    with pytest.raises(DataError, match="outside the data directory"):
        loaders.mnist_from_dir(mnist, "test")


def test_jsonl_record_with_a_unicode_line_separator_is_one_record(tmp_path):
    # JSON allows U+2028 unescaped in a string (json.dumps(..., ensure_ascii=False) writes it, as make_quick
    # does); str.splitlines() cut the record in two: "line 1 is not JSON (Unterminated string ...)"
    path = tmp_path / "train.jsonl"
    record = {"sentence": "first\u2028second\x85third", "label": "positive"}
    path.write_text(json.dumps(record, ensure_ascii=False) + "\r\n\n" + json.dumps(GOOD[1]) + "\n", encoding="utf-8")
    assert read_records(path) == [record, GOOD[1]]


# ------------------------------------------------------------------------------------ names
def test_unknown_order_reads_as_english(capsys, tmp_path):
    err = refused_at_plan_time(capsys, tmp_path, "run", "--methods", "ewc", "--stream", "permuted-digits",
                               "--orders", "99", "--seeds", "0", "--no-progress")
    # was: "unknown order of stream 'permuted-digits' '99' Known order of stream 'permuted-digits's: 1, 2, 3"
    assert "unknown order '99' of stream 'permuted-digits' Known orders: 1, 2, 3" in err
    assert "'s" not in err


def test_unknown_name_plurals():
    assert [plural_of(k) for k in ("method", "registry", "index", "key")] == ["methods", "registries", "indexes", "keys"]
    msg = str(UnknownNameError("registry", "methodz", ["methods", "models"]))
    assert msg == "unknown registry 'methodz' — did you mean 'methods'? Known registries: methods, models"
    assert "Known people: a" in str(UnknownNameError("person", "b", ["a"], plural="people"))


# ------------------------------------------------------------------------------------ result files
def test_examples_that_do_not_decode_to_their_n_scores_are_result_file_errors():
    """A result.json's per-example scores edited by hand: not base64, cut, or a count that does not match. Each
    was a binascii.Error, a zlib.error, or silently fewer (or zero-padded) scores in the verdicts' bootstrap."""
    import torch

    from clbench._core.examples import decode, encode, final_row
    from clbench.errors import ResultFileError

    bits = encode(torch.tensor([1.0, 0.0, 1.0]))
    f16 = encode(torch.tensor([0.5, 0.25]))
    assert bits is not None and f16 is not None and "bits" in bits and "f16" in f16
    assert decode(bits).tolist() == [1.0, 0.0, 1.0]
    for entry, message in [
        ({**bits, "bits": "!!!notbase64"}, "is not base64 of zlib data"),
        ({**bits, "bits": "AAAA"}, "is not base64 of zlib data"),  # base64, but not zlib
        ({**bits, "n": 30}, "holds 8 bits for its n=30 scores"),  # was: 30 scores, 27 of them zero padding
        ({**f16, "n": 5}, "holds 4 bytes of float16 for its n=5 scores"),  # was: 2 scores for 5
        ({"n": 2}, "holds neither `bits` nor `f16`"),  # was: KeyError
    ]:
        with pytest.raises(ResultFileError, match=re.escape(message)):
            decode(entry)
    with pytest.raises(ResultFileError, match=r"examples\[1\] of task 'b' is not base64"):
        final_row([[bits, None], [bits, {**bits, "bits": "!"}]], ["a", "b"])
    with pytest.raises(ResultFileError, match=r"examples\[1\] holds 1 entries for its 2 tasks"):
        final_row([[bits, None], [bits]], ["a", "b"])  # was: a ValueError of zip(strict=True)
