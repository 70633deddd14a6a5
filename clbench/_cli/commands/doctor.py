"""``clbench doctor``: check this environment."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from clbench._core.registry import Registries


@click.command(name="doctor")
@click.option("--out", default="runs", show_default=True, type=click.Path(path_type=Path))
@click.pass_obj
def command(regs: Registries, out: Path) -> None:
    """Check this environment: packages, device, plugins, quick-profile data, output directory."""
    from clbench._tools.doctor import checks

    failed = False
    for status, what, detail in checks(regs, out):
        failed |= status == "FAIL"
        click.echo(f"[{status:>4}] {what}: {detail}")
    sys.exit(1 if failed else 0)
