"""Run cells as Ray tasks: one cell per task, with the CPUs/GPUs it asks for.

Scheduling, placement and retries are Ray's; clbench only ships each cell (plain data) to a worker,
which rebuilds the same registries (same ``-p no:`` list) and runs it with the ordinary runner.
Results land in the shared result directory, so resume rules are the local ones: a cell complete on
any worker is never rerun.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from clbench.cell import Cell, CellResult
from clbench.errors import ClbenchError
from clbench.specs import ExecutorContext


class RayExecutor:
    def __init__(self, context: ExecutorContext) -> None:
        options = context.options
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ClbenchError("--executor ray needs Ray: pip install 'clbench[ray]'") from None
        self.worker = context.worker  # clbench.specs.Workers: run_one sets up a task's process and runs its cell
        self.address = options.get("address")
        self.disabled = context.disabled
        self.fail_fast = context.fail_fast
        self.cpus = float(options.get("cell_cpus") or 1)
        gpus = options.get("cell_gpus")
        self.gpus = float(gpus if gpus is not None else (1 if context.requires_gpu else 0))
        # a cell given N GPUs runs data-parallel on them (--nproc N inside its task); --nproc alone, on the CPU
        nproc = context.nproc
        whole = int(self.gpus) if self.gpus >= 1 and self.gpus.is_integer() else 1
        if nproc not in (None, 1) and self.gpus >= 1 and nproc != whole:
            raise ClbenchError(f"--nproc {nproc} with --cell-gpus {gpus:g}: a data-parallel cell runs one rank per "
                               "GPU; give --cell-gpus N alone (it implies --nproc N)")
        self.nproc = int(nproc) if nproc not in (None, 1) else whole

    def run(self, cells: Iterable[Cell], run_cell: Callable[[Cell], CellResult]) -> Iterator[CellResult]:
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, ignore_reinit_error=True, log_to_driver=False)
        task = ray.remote(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=0)(self.worker.run_one)
        pending = [task.remote(cell, self.disabled, self.fail_fast, self.nproc) for cell in cells]
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                yield ray.get(done[0])
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
