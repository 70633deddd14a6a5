"""The cuBLAS workspace PyTorch allocates on a GPU (memory.CUDA_WORKSPACE_BYTES): memory_allocated after one matrix
product and its backward, beyond the tensors, on the main thread and then on another thread.

    python benchmarks/gpu_cublas_workspace.py      # on a CUDA machine

Measured 2026-11-26 on an H200, torch 2.11.0+cu130: 64 MiB after the first forward and backward (the main thread's
handle and autograd's), 32 MiB more once another thread multiplied; none of it freed (96 MiB with no tensors left).
"""

from __future__ import annotations

import sys
import threading

import torch


def probe(dtype: torch.dtype, n: int = 2000) -> None:
    x = torch.randn(128, 784, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(n, 784, device="cuda", dtype=dtype, requires_grad=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    (x @ w.T).relu().sum().backward()
    torch.cuda.synchronize()
    grads = (x.numel() + w.numel()) * x.element_size()
    print(f"{dtype}: held after the step beyond the gradients {torch.cuda.memory_allocated() - base - grads:,} bytes")


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_cublas_workspace: no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True
    print(torch.__version__, torch.cuda.get_device_name())
    probe(torch.float32)  # the first product: the workspaces appear
    probe(torch.float32)  # none more
    probe(torch.bfloat16)
    worker = threading.Thread(target=probe, args=(torch.float32,))
    worker.start()
    worker.join()  # a new thread: one more
    print(f"memory_allocated with no tensors left: {torch.cuda.memory_allocated():,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
