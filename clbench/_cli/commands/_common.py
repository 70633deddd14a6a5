"""Small helpers shared by the subcommands."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.decorators import FC

T = TypeVar("T")


# What `clbench` prints on Ctrl-C or SIGTERM (reset by each `main`); `clbench run` says its checkpoints are kept.
INTERRUPTED_DEFAULT = "interrupted: every file clbench writes is written whole or not at all; rerun the command"
INTERRUPTED = {"line": INTERRUPTED_DEFAULT}


def warned(fn: Callable[[], T]) -> T:
    """``fn()``, with every warning it raises printed as one ``warning: ...`` line on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = fn()
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)
    return value


def count(n: int, noun: str) -> str:
    """``1 cell``, ``2 cells``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def unusable(problems: list[str]) -> int:
    """Print one ``unusable: ...`` line per result a gate could not use (:func:`clbench._core.results.scan`); their
    number (a gate that met any exits 1: it did not check everything it was given)."""
    for problem in problems:
        click.echo(f"unusable: {problem}", err=True)
    return len(problems)


def skipping(problems: list[str]) -> int:
    """Print one ``warning: skipping ...`` line per result a reader leaves out (:func:`clbench._core.results.scan`); their
    number. For the commands that show what they can (``leaderboard``, ``show``), not the gates (:func:`unusable`)."""
    for problem in problems:
        click.echo(f"warning: skipping {problem}", err=True)
    return len(problems)


def _margins(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, float]:
    """``--margin`` values (``2``, ``STREAM=2``, ``SCENARIO=2``) as :attr:`clbench._tools.tables.Judging.margins`."""
    from clbench._tools.tables import parse_margins

    try:
        return parse_margins(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


margin_option = click.option(
    "--margin",
    "margins",
    multiple=True,
    callback=_margins,
    help="Δ of the verdict rule, fixed before you look: 2 (every table), or STREAM=2 or SCENARIO=2 (repeat the "
    "option). Default: each scenario's (docs/verdicts.md).",
)


def comma_set(value: str | None) -> set[str] | None:
    """A comma list option's names (``--methods a,b``); None when the option was not given."""
    return {v.strip() for v in value.split(",") if v.strip()} if value else None


class Jobs(click.ParamType):
    """``--jobs``: a positive integer or ``auto``."""

    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int) or str(value).strip().lower() == "auto":
            return value if isinstance(value, int) else "auto"
        try:
            jobs = int(value)
        except ValueError:
            self.fail(f"{value!r} is not a number of processes or 'auto'", param, ctx)
        if jobs < 1:
            self.fail(f"{value!r}: at least 1", param, ctx)
        return jobs


def jobs_option(help: str) -> Callable[[FC], FC]:
    """``-j/--jobs N|auto`` (default auto), as ``clbench run``, ``tune`` and ``stale --rerun`` take it."""
    return click.option("--jobs", "-j", default="auto", show_default=True, type=Jobs(), help=help)
