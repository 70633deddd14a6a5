"""The LPS paper's Table II as the ``paper-lps`` profile's targets (the profile and its streams are
``vision_streams``'; the numbers are data, in ``paper-lps.targets.json``), and ``paper-lps-tenth``: its PackNet and
LPS columns on permuted MNIST at a tenth of the paper's epochs, the largest scale at which both fit one session of
two CPU cores (the paper's epochs plan at 1.0 and 2.5 PFLOP a cell: ~5 h and ~13 h there; docs/parity.md)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from clbench import hookimpl
from clbench.specs import ProfileSpec, TargetsSpec

TENTH = ProfileSpec(
    "paper-lps-tenth",
    "paper-lps's PackNet and LPS columns on permuted MNIST at a tenth of the paper's epochs a phase (PackNet 3/3, "
    "LPS 3/9/3 warm-up/ADMM/final; every other setting paper-lps's); one CPU session",
    version="1",
    seeds=(0,),
    methods=("packnet", "lps"),
    streams=("permuted-mnist",),
    extends="paper-lps",
)


def _targets() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("paper-lps.targets.json").read_text("utf-8")
    return dict(json.loads(text))


def _tenth(targets: dict[str, Any]) -> dict[str, Any]:
    """The paper's numbers for the rows ``paper-lps-tenth`` runs, its table named with the scale it runs at."""
    rows = [r for r in targets["rows"] if r["stream"] in TENTH.streams and r["method"] in TENTH.methods]
    table = f"{targets['table']}; clbench at a tenth of the paper's epochs (the paper's own epochs: `paper-lps`)"
    return {**targets, "profile": TENTH.name, "table": table, "rows": rows, "not_implemented": []}


@hookimpl
def clbench_add_profiles() -> list[ProfileSpec]:
    return [TENTH]


@hookimpl
def clbench_add_targets() -> list[TargetsSpec]:
    targets = _targets()
    return [TargetsSpec("paper-lps", targets), TargetsSpec(TENTH.name, _tenth(targets))]
