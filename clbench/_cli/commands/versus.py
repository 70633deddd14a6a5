"""``clbench versus A B``: two result trees compared method by method with the one verdict rule."""

from __future__ import annotations

from pathlib import Path

import click

from clbench._cli.commands._common import comma_set, margin_option, skipping
from clbench._core.registry import Registries
from clbench.errors import ClbenchError


@click.command(name="versus")
@click.argument("a", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("b", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--labels", default=None, help="Names of A and B in the table, `A,B` (default: the folders' names).")
@margin_option
@click.option("--methods", default=None, help="Only these methods (a comma list).")
@click.option("--stream", "streams", default=None, help="Only these streams (a comma list).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Also write the table there (markdown).")
@click.pass_obj
def command(
    regs: Registries,
    a: Path,
    b: Path,
    labels: str | None,
    margins: dict[str, float],
    methods: str | None,
    streams: str | None,
    out: Path | None,
) -> None:
    """Is B better than A? Method by method, over the cells both trees hold (the same stream, method, order and
    seed), by the one verdict rule with A as the reference (docs/verdicts.md). For two trees made with other
    settings: buffer 200 against 500, the code before a change against after it."""
    from clbench._core.results import scan
    from clbench._tools.tables import Judging
    from clbench._tools.versus import contrast, markdown
    from clbench.data import atomic_write_text

    names = tuple(labels.split(",")) if labels else (a.resolve().name, b.resolve().name)
    if len(names) != 2 or not all(n.strip() for n in names):
        raise click.BadParameter(f"{labels!r}: give two names, `A,B`", param_hint="--labels")
    first, second = scan(a), scan(b)
    bad = skipping(first.problems + second.problems)
    rows, notes = contrast(
        first.results, second.results, Judging.of(regs, margins), comma_set(methods), comma_set(streams)
    )
    if not rows:
        raise ClbenchError(
            f"no (stream, method) has a complete cell in both {a} and {b}: nothing to compare"
            + (f" ({bad} results unusable)" if bad else "")
        )
    text = markdown(rows, (names[0].strip(), names[1].strip()))
    click.echo(text)
    for why, keys in notes.items():
        click.echo(f"not compared ({why}): {', '.join(keys)}", err=True)
    if out is not None:
        try:
            atomic_write_text(out, text)
        except OSError as exc:
            raise ClbenchError(f"cannot write {out}: {exc.strerror or exc}") from None
        click.echo(f"wrote {out}", err=True)
