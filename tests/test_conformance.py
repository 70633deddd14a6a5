"""The conformance matrix: every registered method × a tiny model × a two-task stream, resume included.

A new method plugin is tested here by being installed; nothing needs to be added to this file.
"""

from __future__ import annotations

import pytest

from clbench import footprints, testing
from clbench.cell import FOOTPRINT_FILE

REGS = testing.registry()


@pytest.mark.parametrize("method", sorted(REGS.methods), ids=str)
def test_method_conforms(method, tmp_path):
    regs = testing.registry()
    result = testing.check_method(regs, method, tmp_path)
    spec = regs.methods.get(method)
    saved = footprints.load(next(tmp_path.rglob(FOOTPRINT_FILE)))
    assert len(saved) == 2, "one footprint per task"
    kinds = footprints.kinds(saved)
    if spec.footprint_kind != "none":
        assert kinds <= {spec.footprint_kind}, f"{method} declares {spec.footprint_kind} footprints, stored {kinds}"
    assert result.config["methods"].keys() == {method}
