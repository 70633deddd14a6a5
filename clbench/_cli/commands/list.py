"""``clbench list``: what is installed and from where; ``clbench list settings NAME``: a plugin's settings."""

from __future__ import annotations

import textwrap
from typing import Any

import click

from clbench._cli.commands import settings as settings_mod
from clbench._core.registry import Origin, Registries

KINDS = ("methods", "models", "streams", "metrics", "profiles", "executors")
WIDTH = 110  # help texts are wrapped to this many columns


def where(origin: Origin) -> str:
    """``plugin lota, clbench 0.1.0``: the name ``-p no:NAME`` takes and the distribution that installed it."""
    return f"plugin {origin.plugin}, {origin.distribution}"


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
def command(regs: Registries, kind: str | None, name: str | None, of_kind: str | None) -> None:
    """What is registered, with a description, its plugin and distribution.

    `clbench list settings NAME` prints the settings of a method, model or stream: type, default, range,
    preset values per profile key and the help it declares; `clbench list settings train` (or
    `metrics`) those every cell has.
    """
    if kind == "settings":
        if name is None:
            raise click.UsageError("clbench list settings NAME: name a method, model or stream")
        show_settings(regs, name, of_kind)
        return
    if name is not None:
        raise click.UsageError(f"unexpected argument {name!r}: only `clbench list settings NAME` takes a name")
    if of_kind is not None:
        raise click.UsageError("--kind goes with `clbench list settings NAME`")
    if kind == "plugins":
        show_plugins(regs)
        return
    for k in [kind] if kind else KINDS:
        reg = regs.kind(k)
        click.echo(f"{k}:")
        if not len(reg):
            click.echo("  (none)")
        for item in reg:
            spec = reg.get(item)
            desc = getattr(spec, "description", "")
            if k == "profiles" and item in regs.targets:  # a paper's numbers another plugin gives
                desc += f"; the paper's numbers from {where(regs.targets.origins[item])}"
            memory = getattr(spec, "memory", None)
            if k == "methods" and memory is not None:  # what train.memory sets
                desc += f"; memory: {item}.{memory.setting}" + (" a task" if memory.per == "task" else "")
            click.echo(f"  {item:<22} {desc}  ({where(reg.origins[item])})")


def show_plugins(regs: Registries) -> None:
    """Every loaded plugin — the name ``-p no:NAME`` takes — its distribution and what it registers (observers
    and run options too, which no other list shows)."""
    from clbench._core.boundary import origin_of

    click.echo("plugins:")
    rows = []
    for plugin in regs.pm.get_plugins():
        origin = origin_of(regs, plugin)
        offers = [
            f"{k} {', '.join(n for n in regs.kind(k) if regs.kind(k).origins[n].plugin == origin.plugin)}"
            for k in (*KINDS, "options", "targets", "memory")
        ]
        offers = [o for o in offers if not o.endswith(" ")]
        hooks = sorted(
            h.name.removeprefix("clbench_")
            for h in regs.pm.get_hookcallers(plugin) or ()
            if not h.name.startswith("clbench_add_")
        )
        if hooks:
            offers.append(f"observes {', '.join(hooks)}")
        rows.append((origin.plugin, origin.distribution, "; ".join(offers) or "nothing"))
    for name, dist, offered in sorted(rows):
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
