"""The ``clbench`` command: the group, and ``main`` (plugins, exit codes, one-line errors).

Each subcommand is a module of :mod:`clbench._cli.commands`. Plugins are loaded before the command line is
parsed (their options join ``clbench run``), so ``-p no:NAME`` and ``--debug`` are read from argv first,
as pytest does with ``-p``; they are declared once, on the group, and may stand anywhere on the line.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import click

from clbench._cli.commands import doctor, leaderboard, metrics, run, show, tune, verify, versus
from clbench._cli.commands import list as list_
from clbench._cli.commands._common import INTERRUPTED, INTERRUPTED_DEFAULT
from clbench._cli.commands.list import KINDS  # noqa: F401 (kept importable from here)
from clbench._cli.commands.run import summary  # noqa: F401 (public: the run's closing lines and exit code)
from clbench._core import console
from clbench._core.listing import Listing
from clbench._core.registry import Registries, check_disabled
from clbench.errors import ClbenchError


def _early_args(argv: Sequence[str]) -> tuple[list[str], bool]:
    disabled, debug = [], "--debug" in argv
    for i, arg in enumerate(argv):
        value = None
        if arg == "-p" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("-p") and len(arg) > 2:
            value = arg[2:]
        if value and value.startswith("no:"):
            disabled.append(value[3:])
    return disabled, debug


def _hoist(args: Sequence[str]) -> list[str]:
    """``args`` with ``-p VALUE``/``-pVALUE`` and ``--debug`` moved in front of the subcommand, where the
    group declares them, so ``clbench run ... --debug`` and ``clbench run -p no:ray`` keep working (as
    :func:`_early_args` reads them anywhere). Nothing after ``--`` moves."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        if arg == "--debug" or (arg.startswith("-p") and len(arg) > 2 and not arg.startswith("--")):
            front.append(arg)
        elif arg == "-p":
            front.extend(args[i : i + 2])
            i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest


class ClbenchGroup(click.Group):
    """The ``clbench`` group: its own options (``-p``, ``--debug``) may come after the subcommand too."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _hoist(args))


def build_cli(regs: Registries | Listing | None) -> click.Group:
    """The ``clbench`` command group for these registries: one command per module of :mod:`clbench._cli.commands`,
    each reading ``regs`` from ``ctx.obj``; ``clbench run`` also takes the options plugins add. None: only the
    group's own help and version are asked for (no plugin loaded)."""

    @click.group(
        cls=ClbenchGroup, name="clbench", context_settings={"help_option_names": ["-h", "--help"], "obj": regs}
    )
    @click.option(
        "-p",
        "plugins",
        multiple=True,
        metavar="no:NAME",
        help="Disable plugin NAME (repeatable; see `clbench list` for plugin names). Read before the "
        "command line is parsed, so plugins' options never load.",
    )
    @click.option("--debug", is_flag=True, help="Show full tracebacks.")
    @click.version_option(package_name="clbench")
    def cli(plugins: tuple[str, ...], debug: bool) -> None:
        """clbench: continual-learning benchmarks with plugins for methods, models, streams and metrics."""
        for value in plugins:
            if not value.startswith("no:") or len(value) == 3:
                raise click.UsageError(f"-p {value}: expected no:NAME, which disables plugin NAME")

    options = regs.options.values() if isinstance(regs, Registries) else (regs.options or []) if regs else ()
    cli.add_command(run.with_plugin_options(run.command, options))
    for cmd in (
        list_.command,
        leaderboard.command,
        show.command,
        metrics.command,
        verify.command,
        verify.compare,
        versus.command,
        verify.stale,
        doctor.command,
        tune.command,
    ):
        cli.add_command(cmd)
    return cli


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM ends a run as Ctrl-C does: checkpoints kept, one line, resumable


def harness_registry(disabled: Sequence[str] = ()) -> Registries:
    """Every installed plugin's registries (:func:`clbench._exec.local.harness_registry`), imported when a command
    needs them: they import torch."""
    from clbench._exec.local import harness_registry as build

    return build(disabled=disabled)


GROUP_ONLY = {"-h", "--help", "--version"}


def _group_only(args: Sequence[str]) -> bool:
    """Whether the command line names no subcommand, only the group's help or version (``-p`` and ``--debug``
    aside): then no plugin is loaded (loading them imports torch, seconds of CPU, for a help screen)."""
    rest, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "-p":
            skip = True
        elif arg != "--debug" and not (arg.startswith("-p") and not arg.startswith("--")):
            rest.append(arg)
    return all(arg in GROUP_ONLY for arg in rest)


def _help_without_plugins(args: Sequence[str]) -> bool:
    """Whether the command line asks for a subcommand's help, of a subcommand whose options no plugin adds (every one
    but ``run``): its help screen needs no plugin loaded."""
    words = [a for a in _hoist(args) if not a.startswith("-") and not a.startswith("no:")]
    return _asks_help(args) and bool(words) and words[0] != "run"


def _asks_help(args: Sequence[str]) -> bool:
    head = args[: list(args).index("--")] if "--" in args else args
    return any(a in ("-h", "--help") for a in head)


def _listing_only(args: Sequence[str]) -> bool:
    """Whether the command is ``clbench list [KIND]`` (names and descriptions) or ``clbench run --help`` (the
    options plugins add), which a cached listing gives (``clbench list settings NAME`` reads a plugin's config
    classes and builds the registries)."""
    words = [a for a in _hoist(args) if not a.startswith("-")]
    if "-p" in args:  # -p's value is not a word of the command
        words = [w for w in words if not w.startswith("no:")]
    if words and words[0] == "run":
        return _asks_help(args)
    return bool(words) and words[0] == "list" and "settings" not in words[1:]


def _registries(disabled: Sequence[str], listing_only: bool) -> Registries | Listing:
    """Every installed plugin's registries; for ``clbench list [KIND]`` and ``clbench run --help``, the listing
    cached for what is installed (:mod:`clbench._core.listing`) when there is one, and one kept for the next time
    when the build warned of nothing."""
    from clbench._core import listing

    if listing_only:
        cached = listing.load(disabled)
        if cached is not None:
            return cached
    with contextlib.redirect_stdout(sys.stderr):  # a plugin printing at import must not corrupt `show --json`
        if not listing_only:
            return harness_registry(disabled=disabled)
        with warnings.catch_warnings(record=True) as caught:
            regs = harness_registry(disabled=disabled)
    for w in caught:  # shown as they would have been
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if not caught:
        listing.save(listing.Listing.of(regs), disabled)
    return regs


def _refuse_repeated_options(cli: click.Group, args: Sequence[str]) -> None:
    """A single-value option given twice (``--methods a --methods b``): click keeps the last silently; refuse it."""
    name = next((a for a in args if not a.startswith("-")), None)
    command = cli.commands.get(name) if name else None
    if command is None:
        return
    assert name is not None  # a command was found by it
    after = list(args[list(args).index(name) + 1 :])
    if "--" in after:
        after = after[: after.index("--")]
    for param in command.params:
        if not isinstance(param, click.Option) or param.multiple or param.count:
            continue
        names = [o for o in param.opts + param.secondary_opts]
        given = [a for a in after if a in names or any(a.startswith(f"{o}=") for o in names if o.startswith("--"))]
        if len(given) > 1:
            raise click.UsageError(
                f"{param.opts[-1]} is given {len(given)} times; give it once (a comma list names several values)"
            )


def _format_warning(message: Any, category: Any, filename: str, lineno: int, line: str | None = None) -> str:
    return f"warning: {message}\n"


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    disabled, debug = _early_args(args)
    INTERRUPTED["line"] = INTERRUPTED_DEFAULT
    term = signal.signal(signal.SIGTERM, _terminate) if threading.current_thread() is threading.main_thread() else None
    formatwarning, showwarning = warnings.formatwarning, warnings.showwarning
    if not debug:
        warnings.formatwarning = _format_warning
        console.one_line_warnings()
    console.quiet_third_party_bars()
    try:
        check_disabled(disabled)
        regs: Registries | Listing | None = None
        if not _group_only(args) and not _help_without_plugins(args):
            regs = _registries(disabled, _listing_only(args))
        cli = build_cli(regs)
        _refuse_repeated_options(cli, _hoist(args))
        cli.main(args=args, prog_name="clbench", standalone_mode=False)
    except ClbenchError as exc:
        if debug:
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):  # click turns Ctrl-C inside a command into Abort
        click.echo(INTERRUPTED["line"], err=True)
        sys.exit(130)
    except OSError as exc:  # outside a cell (a result tree we cannot read, a full disk): one line
        if debug:
            raise
        click.echo(f"error: {exc.filename or ''}: {exc.strerror or exc}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    finally:
        warnings.formatwarning, warnings.showwarning = formatwarning, showwarning
        if term is not None:
            signal.signal(signal.SIGTERM, term)


if __name__ == "__main__":
    main()
