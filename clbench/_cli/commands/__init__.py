"""The ``clbench`` subcommands, one module each (as tox splits its commands).

Every module defines ``command``, a :class:`click.Command` that reads the registries from the click
context (``ctx.obj``, put there by :func:`clbench._cli.main.build_cli`); ``verify`` defines ``compare`` too.
:mod:`clbench._cli.commands.settings` is no command: it reads a plugin's settings for ``clbench list settings``.
These modules never import :mod:`clbench._cli.main` (``python -m clbench`` runs it as ``__main__``).
"""
