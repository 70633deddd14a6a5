"""The testing kit for plugin authors: contract checks, tiny plugins and pytest fixtures.

Put ``pytest_plugins = ["clbench.testing"]`` in a ``conftest.py`` for the fixtures. This module is the kit's public
name; its code lives in :mod:`clbench._cli.kit`, beside the command line it drives.
"""

from clbench._cli.kit import (
    TEST_PROFILE,
    KillAfterTask,
    RunRequest,
    TinyPlugin,
    TinyTextConfig,
    TinyTextModel,
    TinyTextStream,
    TinyVectorStream,
    check_method,
    check_metric,
    check_model,
    check_stream,
    clbench_registry,
    execute,
    fitting_stream,
    make_plan,
    registry,
    run,
    run_cell,
)

__all__ = [
    "TEST_PROFILE", "KillAfterTask", "RunRequest", "TinyPlugin", "TinyTextConfig", "TinyTextModel", "TinyTextStream",
    "TinyVectorStream", "check_method", "check_metric", "check_model", "check_stream",
    "clbench_registry", "execute", "fitting_stream", "make_plan", "registry", "run", "run_cell",
]
