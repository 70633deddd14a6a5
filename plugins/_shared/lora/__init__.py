"""The shared LoRA machinery (adapters, merging, footprints, the family's base method, settings and presets) used
by the LoRA-family method plugins.

It registers nothing itself: ``seqlora``, ``inclora``, ``olora``, ``nlora``, ``mtl`` and ``pertask``
build on :mod:`clbench_plugins._shared.lora.method` (``seqlora`` and ``mtl`` on
:mod:`clbench_plugins._shared.lora.sequential`).
"""
