"""``clbench list``: what is installed and from where; ``clbench list settings NAME``: a plugin's settings."""

from __future__ import annotations

import textwrap
from typing import Any

import click

from clbench._cli.commands import settings as settings_mod
from clbench._core.listing import KINDS, Listing, where
from clbench._core.registry import Registries

WIDTH = 110  # help texts are wrapped to this many columns


@click.command(name="list")
@click.argument("kind", required=False, type=click.Choice([*KINDS, "plugins", "settings"]))
@click.argument("name", required=False)
@click.option(
    "--kind",
    "of_kind",
    type=click.Choice(settings_mod.KINDS),
    default=None,
    help="With `settings`: whether NAME is a method, model or stream (when it names more than one).",
)
@click.pass_obj
def command(regs: Registries | Listing, kind: str | None, name: str | None, of_kind: str | None) -> None:
    """What is registered, with a description, its plugin and distribution.

    `clbench list settings NAME` prints the settings of a method, model or stream: type, default, range,
    preset values per profile key and the help it declares; `clbench list settings train` (or
    `metrics`) those every cell has.
    """
    if kind == "settings":
        if name is None:
            raise click.UsageError("clbench list settings NAME: name a method, model or stream")
        assert isinstance(regs, Registries)  # (main builds them for `settings`: a plugin's config classes)
        show_settings(regs, name, of_kind)
        return
    if name is not None:
        raise click.UsageError(f"unexpected argument {name!r}: only `clbench list settings NAME` takes a name")
    if of_kind is not None:
        raise click.UsageError("--kind goes with `clbench list settings NAME`")
    listing = regs if isinstance(regs, Listing) else Listing.of(regs)
    if kind == "plugins":
        show_plugins(listing)
        return
    for k in [kind] if kind else KINDS:
        click.echo(f"{k}:")
        if not listing.kinds[k]:
            click.echo("  (none)")
        for entry in listing.kinds[k]:
            click.echo(f"  {entry.name:<22} {entry.description}  ({entry.origin})")


def show_plugins(listing: Listing) -> None:
    """Every loaded plugin — the name ``-p no:NAME`` takes — its distribution and what it registers (observers
    and run options too, which no other list shows)."""
    click.echo("plugins:")
    for name, dist, offered in listing.plugins:
        click.echo(f"  {name:<22} {dist:<28} {offered}")


def show_settings(regs: Registries, name: str, kind: str | None = None) -> None:
    if kind is None and name in ("train", "metrics"):  # the core's scopes: every cell has them
        from clbench import config as cfg

        cls = cfg.TrainConfig if name == "train" else cfg.MetricsConfig
        click.echo(f"{name}: settings of every cell ({cls.__name__}, --set {name}.NAME=VALUE):")
        for row in settings_mod.config_settings(cls, name):
            click.echo(f"  {row.name}: {row.type} = {_value(row.default)}" + (f"  ({row.range})" if row.range else ""))
            _details(row)
        return
    if kind is None and name in ("model", "stream") and name not in regs.kind(name + "s"):
        click.echo(f"{name}: --set {name}.NAME=VALUE sets a setting of the {name} each cell uses; per {name}:")
        reg = regs.kind(name + "s")
        for item in reg:
            rows = settings_mod.config_settings(reg.get(item).config_cls, name)
            click.echo(f"  {item}: {', '.join(r.name for r in rows) or '(no settings)'}")
        click.echo(f"types, defaults and what each does: clbench list settings NAME (a {name} above)")
        return
    kind, spec = settings_mod.find(regs, name, kind)
    rows = settings_mod.settings(regs, name, kind)
    origin = regs.kind(kind + "s").origins[name]
    desc = f": {spec.description}" if getattr(spec, "description", "") else ""
    click.echo(f"{kind} {name} ({where(origin)}){desc}")
    scope = name if kind == "method" else kind
    own = [r for r in rows if r.in_config]
    if own:
        click.echo(f"settings of {spec.config_cls.__name__} (--set {scope}.NAME=VALUE):")
    else:
        click.echo("no settings")
    for row in own:
        default = "required" if row.default is settings_mod.REQUIRED else f"= {_value(row.default)}"
        click.echo(f"  {row.name}: {row.type} {default}" + (f"  ({row.range})" if row.range else ""))
        _details(row)
    other = [r for r in rows if not r.in_config]
    if other:
        click.echo(f"other keys its presets set{' (for this model)' if kind == 'model' else ''}:")
        for row in other:
            click.echo(f"  {row.name}")
            _details(row)


def _details(row: settings_mod.Setting) -> None:
    if row.help:
        click.echo(
            textwrap.fill(
                row.help,
                WIDTH,
                initial_indent=" " * 6,
                subsequent_indent=" " * 6,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    for label, value in row.presets.items():
        click.echo(f"      preset {label}: {_value(value)}")


def _value(value: Any) -> str:
    return repr(value)
