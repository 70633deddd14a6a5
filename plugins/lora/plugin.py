"""The shared LoRA machinery (adapters, merging, footprints) used by the LoRA-family method plugins.

It registers nothing itself: ``seqlora``, ``inclora``, ``olora``, ``nlora``, ``mtl`` and ``pertask``
build on :mod:`clbench_plugins.lora.method`.
"""
