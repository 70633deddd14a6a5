"""Stored results freeze field names: every setting of every config class is part of a cell's identity, so a new
defaulted field would move the config hash of every stored cell, and a renamed one would make them unreadable. A
field added after results exist declares the version it appeared in (``since=``) and is then left out of the
identity at its default (clbench.config.identity_defaults). ``tests/config_fields.json`` is the list of fields
results may hold; a new field without ``since`` fails here, before any committed tree goes stale.

Update the list after adding a field with ``since`` (or a new plugin): ``python tests/test_config_fields.py --write``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from clbench.cell import config_hash, identity
from clbench.config import MetricsConfig, TrainConfig, bounded, identity_defaults, public_name, setting

KNOWN = Path(__file__).with_name("config_fields.json")


def config_classes() -> dict[str, type]:
    """Every config class a result stores: train, metrics, and each registered method's, model's and stream's."""
    from clbench._exec.local import harness_registry

    regs = harness_registry()
    out: dict[str, type] = {"train": TrainConfig, "metrics": MetricsConfig}
    for kind, registry in (("methods", regs.methods), ("models", regs.models), ("streams", regs.streams)):
        for name in registry:
            cls = registry.get(name).config_cls
            if dataclasses.fields(cls):
                out[f"{kind}/{name}"] = cls
    return out


def fields_of(cls: type) -> list[str]:
    return sorted(public_name(f.name) for f in dataclasses.fields(cls))


def test_every_stored_field_still_exists_and_every_new_one_declares_since():
    known = json.loads(KNOWN.read_text(encoding="utf-8"))
    problems = []
    for key, cls in config_classes().items():
        now, before = fields_of(cls), known.get(key)
        if before is None:
            problems.append(f"{key} ({cls.__name__}) is not in {KNOWN.name}: add it (--write)")
            continue
        for gone in sorted(set(before) - set(now)):
            problems.append(
                f"{key}.{gone} was removed or renamed: stored results that hold it no longer read; keep the name"
            )
        since = identity_defaults(cls)
        for new in sorted(set(now) - set(before)):
            if new not in since:
                problems.append(
                    f"{key}.{new} is new and declares no since=VERSION: at its default it would move the config "
                    "hash of every stored cell (bounded(..., since='X.Y.Z') or setting(..., since=...))"
                )
            else:
                problems.append(f"{key}.{new} declares since: add it to {KNOWN.name} (--write)")
    assert not problems, "\n".join(problems)


def test_a_field_with_since_at_its_default_leaves_the_hash_of_a_result_stored_before_it():
    @dataclasses.dataclass(frozen=True)
    class Old:
        width: int = bounded(4, ge=1)

    @dataclasses.dataclass(frozen=True)
    class New:
        width: int = bounded(4, ge=1)
        depth: int = bounded(1, ge=1, since="0.2.0")
        name: str = setting("a", help="", since="0.2.0")

    assert identity_defaults(New) == {"depth": 1, "name": "a"} and identity_defaults(Old) == {}
    before = {"model": {"width": 4}, "stream": {"width": 4}, "methods": {"m": {"width": 4}}, "train": {"lr": 0.1}}
    since = {"model": identity_defaults(New), "stream": identity_defaults(New), "methods": {"m": identity_defaults(New)}}
    for scope in ("model", "stream", "methods"):
        at_default = json.loads(json.dumps(before))
        target = at_default[scope]["m"] if scope == "methods" else at_default[scope]
        target.update(depth=1, name="a")
        assert config_hash(at_default, "s", "1", 0, since) == config_hash(before, "s", "1", 0), scope
        assert config_hash(at_default, "s", "1", 0) != config_hash(before, "s", "1", 0), scope  # without since
        target["depth"] = 2  # another value: another cell
        assert config_hash(at_default, "s", "1", 0, since) != config_hash(before, "s", "1", 0), scope
        assert identity(at_default, "s", "1", 0, since)[scope] != identity(before, "s", "1", 0)[scope]


def test_train_settings_added_since_results_were_stored_are_left_out_at_their_default():
    defaults = identity_defaults(TrainConfig)
    assert defaults["compute_epochs"] == 0 and defaults["memory"] == 0 and defaults["head"] == "masked"
    assert "lr" not in defaults and "epochs" not in defaults  # settings every result has held
    recorded = {"train": {"lr": 0.1, "epochs": 2}}
    now = {"train": {"lr": 0.1, "epochs": 2, **defaults}}
    assert config_hash(now, "s", "1", 0) == config_hash(recorded, "s", "1", 0)


def test_a_version_is_a_version():
    import pytest

    with pytest.raises(ValueError, match="a version such as"):
        bounded(1, since="soon")


def write() -> None:
    KNOWN.write_text(
        json.dumps({k: fields_of(c) for k, c in sorted(config_classes().items())}, indent=1) + "\n", encoding="utf-8"
    )


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write()
