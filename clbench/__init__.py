"""clbench: a plugin-architecture benchmark harness for continual learning."""

from clbench.hookspecs import hookimpl

__all__ = ["hookimpl", "__version__"]
__version__ = "0.1.0"
