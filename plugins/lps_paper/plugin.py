"""The LPS paper's Table II as the ``paper-lps`` profile's targets (the profile and its streams are
``vision_streams``'; the numbers are data, in ``paper-lps.targets.json``)."""

from __future__ import annotations

import json
from importlib import resources

from clbench import hookimpl
from clbench.specs import TargetsSpec


@hookimpl
def clbench_add_targets() -> list[TargetsSpec]:
    text = resources.files(__package__).joinpath("paper-lps.targets.json").read_text("utf-8")
    return [TargetsSpec("paper-lps", json.loads(text))]
