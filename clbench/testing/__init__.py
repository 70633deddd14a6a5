"""What a plugin author needs to test a plugin against the contract, in one import.

In a plugin's ``conftest.py``::

    pytest_plugins = ["clbench.testing"]

then use the fixtures ``clbench_registry`` (a fresh registry: installed plugins + the tiny test
plugin) and ``run_cell`` (run one cell on a tiny stream in a temp directory), or call a check
directly. Each runs the plugin through the real runner and fails with an AssertionError that says
what the plugin must fix:

* :func:`check_method` — a two-task cell: status, matrix, finite metrics, the footprint kind the
  MethodSpec declares, and a cell killed after its first task resumes (not restarts) to the same numbers;
* :func:`check_stream` — tasks, orders, every task's splits and labels, deterministic loading, one cell;
* :func:`check_metric` — valid spec, recorded in result.json, reproduced by ``clbench metrics``,
  deterministic, true to its declared ``needs``;
* :func:`check_model` — a CLModel whose weights train, whose ``predict`` gives label indices in range
  and whose ``state_dict`` round trips, and a complete cell.

The tiny streams are synthetic on purpose: they test plumbing, never accuracy claims.

The kit's modules, by concern: :mod:`~clbench.testing.tiny` (the tiny plugin: streams, a text model, the ``test``
profile), :mod:`~clbench.testing.running` (``registry``, ``run``, ``KillAfterTask``), the checks
(:mod:`~clbench.testing.method_checks`, :mod:`~clbench.testing.stream_checks`,
:mod:`~clbench.testing.metric_checks`, :mod:`~clbench.testing.model_checks`, and what they share in
:mod:`~clbench.testing.contract`) and :mod:`~clbench.testing.fixtures`. The names below are its public API.
"""

try:  # the kit is a pytest plugin: its checks fail, skip and patch through pytest
    import pytest  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by tests/test_testing_kit.py
    raise ImportError("clbench.testing is a pytest plugin and needs pytest: pip install 'clbench[testing]'") from exc

from clbench.testing.fixtures import clbench_registry, run_cell
from clbench.testing.method_checks import check_method
from clbench.testing.metric_checks import check_metric
from clbench.testing.model_checks import check_model
from clbench.testing.running import (
    TEST_PROFILE,  # plugins key test presets to it
    KillAfterTask,
    RunRequest,
    execute,
    fitting_stream,
    make_plan,
    registry,
    run,
)
from clbench.testing.stream_checks import check_stream
from clbench.testing.tiny import (
    TinyImageStream,
    TinyPlugin,
    TinyTextConfig,
    TinyTextModel,
    TinyTextStream,
    TinyVectorStream,
)

__all__ = [
    "TEST_PROFILE",
    "KillAfterTask",
    "RunRequest",
    "TinyImageStream",
    "TinyPlugin",
    "TinyTextConfig",
    "TinyTextModel",
    "TinyTextStream",
    "TinyVectorStream",
    "check_method",
    "check_metric",
    "check_model",
    "check_stream",
    "clbench_registry",
    "execute",
    "fitting_stream",
    "make_plan",
    "registry",
    "run",
    "run_cell",
]
