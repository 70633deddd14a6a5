from __future__ import annotations

from clbench import hookimpl
from clbench.specs import ExecutorSpec, OptionSpec

from .executor import RayExecutor


@hookimpl
def clbench_add_executors() -> list[ExecutorSpec]:
    return [ExecutorSpec("ray", RayExecutor, "one Ray task per cell on a local or remote Ray cluster "
                                            "(pip install 'clbench[ray]')")]


@hookimpl
def clbench_add_options() -> list[OptionSpec]:
    return [
        OptionSpec("address", "Ray cluster address for --executor ray ('auto', HOST:PORT; default: start a local one)",
                   executor="ray"),
        OptionSpec("cell-cpus", "CPUs each cell requests from Ray (default 1)", type=float, executor="ray"),
        OptionSpec("cell-gpus", "GPUs each cell requests from Ray (default: 1 for GPU profiles, else 0)", type=float,
                   executor="ray"),
    ]
