"""How the built-in methods that keep examples count them (``clbench_add_memory``): what ``train.memory`` sets.

Declared apart from the methods' own specs, as ``lps_paper`` gives ``paper-lps`` its targets: a declaration
reaches a cell only as the value of the method's setting, which the cell's configuration records, so the methods'
code (and every result it made) is unchanged by it. DGR keeps a generator, not examples, and is not here."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import Memory, MemorySpec

# the setting each method's examples are counted in; GEM and A-GEM keep an episodic memory of each finished task
MEMORY = {
    "replay": Memory("buffer_size"),
    "der": Memory("buffer_size"),
    "derpp": Memory("buffer_size"),
    "er-ace": Memory("buffer_size"),
    "gdumb": Memory("memory_size"),
    "icarl": Memory("memory_size"),
    "gem": Memory("memory_per_task", per="task"),
    "agem": Memory("memory_per_task", per="task"),
}


@hookimpl
def clbench_add_memory() -> list[MemorySpec]:
    return [MemorySpec(method, memory) for method, memory in MEMORY.items()]
