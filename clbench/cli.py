"""The ``clbench`` command.

Plugins are loaded before the command line is parsed (their options join ``clbench run``), so
``-p no:NAME`` and ``--debug`` are read from argv first, as pytest does with ``-p``.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from clbench.errors import ClbenchError
from clbench.registry import Registries, build_registry, check_disabled
from clbench.results import ERROR_LOG, CellResult

KINDS = ("methods", "models", "streams", "metrics", "profiles", "executors")


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


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def _seeds(value: str | None) -> list[int] | None:
    items = _csv(value)
    if items is None:
        return None
    try:
        seeds = [int(v) for v in items]
    except ValueError:
        raise ClbenchError(f"--seeds {value!r}: expected integers separated by commas, e.g. 0,1,2") from None
    if any(s < 0 for s in seeds):
        raise ClbenchError(f"--seeds {value!r}: seeds are non-negative integers")
    return seeds


def build_cli(regs: Registries) -> click.Group:
    @click.group(context_settings={"help_option_names": ["-h", "--help"]})
    @click.option("-p", "plugins", multiple=True, metavar="no:NAME", help="Disable plugin NAME (repeatable).")
    @click.option("--debug", is_flag=True, help="Show full tracebacks.")
    @click.version_option(package_name="clbench")
    def cli(plugins: tuple[str, ...], debug: bool) -> None:
        """clbench: continual-learning benchmarks with plugins for methods, models, streams and metrics."""

    def run_options(f: Any) -> Any:
        for spec in reversed(regs.options.values()):
            f = click.option(f"--{spec.name}", spec.name.replace("-", "_"), default=spec.default,
                             type=None if spec.is_flag else spec.type, is_flag=spec.is_flag, help=spec.help)(f)
        return f

    @cli.command()
    @click.option("--methods", default=None, help="Comma-separated methods, 'a+b' to compose, or 'all' (default: the profile's).")
    @click.option("--stream", "streams", default=None, help="Comma-separated streams (default: the profile's).")
    @click.option("--orders", default=None, help="Comma-separated order names (default: the profile's).")
    @click.option("--seeds", default=None, help="Comma-separated seeds (default: the profile's).")
    @click.option("--profile", default="quick", show_default=True, help="Named defaults; see `clbench list profiles`.")
    @click.option("--set", "sets", multiple=True, metavar="SCOPE.KEY=VALUE",
                  help="Override a setting, e.g. ewc.lambda=100 or train.epochs=2; a,b,c sweeps.")
    @click.option("--model", default=None, metavar="PLUGIN|NAME_OR_PATH",
                  help="Model plugin, or a hub name / local folder of weights for the stream's model plugin.")
    @click.option("--out", default="runs", show_default=True, type=click.Path(path_type=Path), help="Result directory.")
    @click.option("--data-dir", default=None, type=click.Path(path_type=Path),
                  help="Local data directory for streams that read one (e.g. a CL_Benchmark copy).")
    @click.option("--model-path", default=None, help="Local path (or hub name) of the model's weights.")
    @click.option("--executor", default="local", show_default=True, help="Where cells run; see `clbench list executors`.")
    @click.option("--fail-fast", is_flag=True, help="Stop at the first failed cell.")
    @click.option("--leaderboard/--no-leaderboard", "show_board", default=True, help="Print the leaderboard at the end.")
    @click.option("--progress/--no-progress", default=True, help="Progress bars.")
    @click.option("--debug", is_flag=True, help="Show full tracebacks.")
    @click.option("-p", "plugins", multiple=True, metavar="no:NAME", help="Disable plugin NAME (repeatable).")
    @run_options
    def run(methods: str | None, streams: str | None, orders: str | None, seeds: str | None, profile: str,
            sets: tuple[str, ...], model: str | None, out: Path, data_dir: Path | None, model_path: str | None,
            executor: str, fail_fast: bool, show_board: bool,
            progress: bool, debug: bool, plugins: tuple[str, ...], **options: Any) -> None:
        """Train and evaluate a grid of cells (method × stream × order × seed)."""
        from clbench.config import parse_sets
        from clbench.executors import execute
        from clbench.plan import RunRequest, make_plan

        if model and model not in regs.models and ("/" in model or Path(model).expanduser().exists()):
            if model_path:
                raise click.UsageError(f"--model {model} is a path or hub name, and --model-path is given too")
            model, model_path = None, model  # `--model google-t5/t5-large`: weights for the stream's plugin
        req = RunRequest(profile=profile, methods=methods, streams=_csv(streams), orders=_csv(orders),
                         seeds=_seeds(seeds), sets=parse_sets(sets), model=model, out=out, options=options,
                         data_dir=str(data_dir) if data_dir else None, model_path=model_path)
        plan = make_plan(regs, req)
        regs.executors.get(executor)
        for line in plan.skipped:
            click.echo(f"skipped: {line}", err=True)
        click.echo(f"clbench: {_count(len(plan.cells), 'cell')}, profile {plan.profile!r}, results in {out}/", err=True)
        results = execute(plan, regs, executor=executor, fail_fast=fail_fast, progress=progress, options=options)
        if show_board:
            from clbench.leaderboard import render

            click.echo(render(results, regs.metrics.values(), f"profile `{plan.profile}` ({out})"))
        lines, code = summary(results, getattr(results, "faults", ()))
        for line in lines:
            click.echo(line, err=True)
        sys.exit(code)

    @cli.command(name="list")
    @click.argument("kind", required=False, type=click.Choice(KINDS))
    def list_(kind: str | None) -> None:
        """What is registered, with a description and the distribution it comes from."""
        for k in [kind] if kind else KINDS:
            reg = regs.kind(k)
            click.echo(f"{k}:")
            if not len(reg):
                click.echo("  (none)")
            for name in reg:
                spec = reg.get(name)
                desc = getattr(spec, "description", "")
                click.echo(f"  {name:<22} {desc}  [{reg.origins[name]}]")

    @cli.command()
    @click.argument("runs", nargs=-1, type=click.Path(exists=True, path_type=Path))
    @click.option("--out", default="leaderboards", show_default=True, type=click.Path(path_type=Path))
    @click.option("--plots/--no-plots", default=True, help="Accuracy-over-time plot per stream.")
    @click.option("--heatmaps", is_flag=True, help="Also an accuracy-matrix heatmap per cell.")
    @click.option("--check", is_flag=True, help="Write nothing; exit 1 if the markdown on disk differs.")
    def leaderboard(runs: tuple[Path, ...], out: Path, plots: bool, heatmaps: bool, check: bool) -> None:
        """Markdown tables (and plots) from result directories (default: runs/)."""
        from clbench.results import iter_results

        results = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for root in runs or (Path("runs"),):
                results.extend(iter_results(root))
        for w in caught:
            click.echo(f"warning: {w.message}", err=True)
        if not results:
            raise ClbenchError(f"no result files under {', '.join(map(str, runs or ('runs',)))}")
        seen: dict[tuple[str, str], Path | None] = {}
        for r in results:  # the same cell twice would be pooled as if it were two seeds
            where = seen.setdefault((str(r.config.get("profile", "custom")), r.key), r.path)
            if where != r.path:
                raise ClbenchError(f"cell {r.key} of profile {r.config.get('profile', 'custom')!r} is in {where} and in "
                                   f"{r.path}; give one result tree per profile")
        try:
            stale = _write_leaderboards(results, out, plots, heatmaps, check)
        except OSError as exc:
            raise ClbenchError(f"cannot write leaderboards to {out}/: {exc.strerror or exc}") from None
        if stale:
            for p in stale:
                click.echo(f"stale: {p} differs from what the results give; run `clbench leaderboard`", err=True)
            sys.exit(1)

    def _write_leaderboards(results: list[Any], out: Path, plots: bool, heatmaps: bool, check: bool) -> list[Path]:
        from clbench.leaderboard import by_profile, render

        stale = []
        for profile, group in by_profile(results).items():
            path = out / f"{profile}.md"
            text = render(group, regs.metrics.values(), f"clbench leaderboard — profile `{profile}`", out.resolve())
            if check:
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    stale.append(path)
                continue
            from clbench.results import atomic_write_text

            atomic_write_text(path, text)
            click.echo(f"wrote {path}")
            if plots:
                from clbench.plots import accuracy_over_time, heatmap, sweep_plots

                for stream in sorted({r.stream for r in group}):
                    p = accuracy_over_time(group, stream, out / "plots" / f"{profile}-{stream}-accuracy.png")
                    click.echo(f"wrote {p}")
                for p in sweep_plots(group, out / "plots", profile):  # AA against a swept value (method@key=v)
                    click.echo(f"wrote {p}")
                if heatmaps:
                    for r in group:
                        if r.status == "complete":
                            heatmap(r, out / "plots" / "heatmaps" / profile / r.stream / r.method /
                                    f"order-{r.order}-seed-{r.seed}.png")
        return stale

    @cli.command()
    @click.argument("path", type=click.Path(exists=True, path_type=Path))
    @click.option("--plot", type=click.Path(path_type=Path), default=None, help="Also write the heatmap PNG here.")
    @click.option("--json", "as_json", is_flag=True, help="Print the raw result.json.")
    def show(path: Path, plot: Path | None, as_json: bool) -> None:
        """The accuracy matrix and metrics of one cell."""
        from clbench.leaderboard import render_cell
        from clbench.results import RESULT_FILE, read_result

        if path.is_dir():
            path = path / RESULT_FILE
        r = read_result(path)
        if as_json:
            click.echo(json.dumps(r.to_json(), indent=2, sort_keys=True))
            return
        click.echo(render_cell(r))
        if plot:
            from clbench.plots import heatmap

            click.echo(f"wrote {heatmap(r, plot)}")

    @cli.command()
    @click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
    @click.option("--check", is_flag=True, help="Write nothing; exit 1 if a stored metric differs from the recomputed one.")
    def metrics(runs: tuple[Path, ...], check: bool) -> None:
        """Recompute every complete cell's metrics from its matrix and footprint file (no training).

        Without --check the recomputed metrics are written into each result.json (after a metric plugin
        changed, say). Footprint files are checked against the sha256 and size their result.json records.
        """
        from clbench.verify import RECOMPUTE_RTOL, recompute_tree

        done = _warned(lambda: recompute_tree(regs, runs, write=not check))
        for d in done.deltas:
            moved = d.note or ", ".join(f"{k}: {a!r} → {b!r}" for k, (a, b) in d.metrics.items()) or "metric errors changed"
            click.echo(f"{'differs' if check else 'updated'}: {d.key}: {moved}", err=True)
        broken = [d for d in done.deltas if d.note]
        partial = len(done.without_footprints)
        click.echo(f"clbench metrics: {done.checked} complete cells recomputed"
                   + (f" ({partial} without a footprint file: matrix metrics only)" if partial else "")
                   + f"; {len(done.deltas) - len(broken)} {'differ' if check else 'changed'} "
                   f"(relative tolerance {RECOMPUTE_RTOL:g}); {len(broken)} unreadable", err=True)
        sys.exit(1 if broken or (check and done.deltas) else 0)

    @cli.command()
    @click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
    @click.option("--cells", "per_stream", default=2, show_default=True, help="Cells rerun per stream (the cheapest).")
    @click.option("--atol", default=0.0, show_default=True, help="Allowed |Δ| in percentage points (scores, AA, F.Ra, BWT).")
    @click.option("--rtol", default=0.0, show_default=True, help="Allowed relative |Δ| of the other metrics.")
    @click.option("--keep", type=click.Path(path_type=Path), default=None, help="Keep the rerun cells here.")
    def verify(run_dir: Path, per_stream: int, atol: float, rtol: float, keep: Path | None) -> None:
        """Rerun a sample of committed cells from their recorded settings and compare the numbers."""
        from clbench.results import iter_results
        from clbench.verify import rerun, sample

        chosen = sample(_warned(lambda: list(iter_results(run_dir))), per_stream)
        if not chosen:
            raise ClbenchError(f"no complete result under {run_dir}")
        click.echo(f"clbench verify: rerunning {len(chosen)} cells of {run_dir}", err=True)
        sys.exit(_report_deltas(chosen, rerun(regs, chosen, keep), atol, rtol))

    @cli.command()
    @click.argument("old", type=click.Path(exists=True, file_okay=False, path_type=Path))
    @click.argument("new", type=click.Path(exists=True, file_okay=False, path_type=Path))
    @click.option("--atol", default=0.0, show_default=True, help="Allowed |Δ| in percentage points (scores, AA, F.Ra, BWT).")
    @click.option("--rtol", default=0.0, show_default=True, help="Allowed relative |Δ| of the other metrics.")
    def compare(old: Path, new: Path, atol: float, rtol: float) -> None:
        """Compare two result trees cell by cell; exit 1 when a number moved beyond the tolerance."""
        from clbench.results import iter_results

        a = _warned(lambda: list(iter_results(old)))
        b = _warned(lambda: list(iter_results(new)))
        sys.exit(_report_deltas(a, b, atol, rtol))

    def _report_deltas(old: list[Any], new: list[Any], atol: float, rtol: float) -> int:
        from tabulate import tabulate

        from clbench.verify import compare as compare_results
        from clbench.verify import percent_metrics, table

        deltas, only_old, only_new = compare_results(old, new)
        percent = percent_metrics(regs)
        click.echo(tabulate(table(deltas, atol, rtol, percent), headers=["cell", "max |Δa| (pp)", "changed", "verdict"],
                            tablefmt="github", disable_numparse=True))
        for key in only_old:
            click.echo(f"missing: {key} (only in the first)", err=True)
        for key in only_new:
            click.echo(f"extra: {key} (only in the second)", err=True)
        bad = [d for d in deltas if not d.within(atol, rtol, percent)]
        click.echo(f"{len(deltas) - len(bad)} within tolerance, {len(bad)} beyond it (atol {atol:g} pp, rtol {rtol:g}); "
                   f"{len(only_old)} missing", err=True)
        return 1 if bad or only_old else 0

    def _warned(fn: Any) -> Any:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = fn()
        for w in caught:
            click.echo(f"warning: {w.message}", err=True)
        return value

    @cli.command()
    @click.option("--out", default="runs", show_default=True, type=click.Path(path_type=Path))
    def doctor(out: Path) -> None:
        """Check this environment: packages, device, plugins, quick-profile data, output directory."""
        from clbench.doctor import checks

        failed = False
        for status, what, detail in checks(regs, out):
            failed |= status == "FAIL"
            click.echo(f"[{status:>4}] {what}: {detail}")
        sys.exit(1 if failed else 0)

    return cli


def summary(results: Sequence[CellResult], faults: Sequence[str] = ()) -> tuple[list[str], int]:
    """The closing lines of a run and its exit code, as pytest's: 0 when every cell is complete or diverged
    (a divergence is a result), 1 when a cell failed or an observer of the run raised."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines = []
    for r in results:
        if r.status == "diverged":
            lines.append(f"diverged: {r.key}: {r.error}")
    for r in results:
        if r.status == "failed":
            log = r.path.parent / ERROR_LOG if r.path else None
            where = f" (traceback: {log})" if log is not None and log.exists() else ""
            lines.append(f"failed: {r.key}: {r.error}{where}")
    lines += [f"fault: {f}" for f in faults]
    lines += [f"metric error: {r.key}: {msg}" for r in results for msg in sorted(r.metric_errors.values())]
    parts = [f"{counts[s]} {s}" for s in ("complete", "diverged", "failed") if counts.get(s)]
    failed = counts.get("failed", 0) + len(faults)
    lines.append(f"clbench: {_count(len(results), 'cell')}: {', '.join(parts) or 'none'}"
                 + (f"; {_count(len(faults), 'observer fault')}" if faults else "") + f"; exit {1 if failed else 0}")
    return lines, 1 if failed else 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM ends a run as Ctrl-C does: checkpoints kept, one line, resumable


def _format_warning(message: Any, category: Any, filename: str, lineno: int, line: str | None = None) -> str:
    return f"warning: {message}\n"


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    disabled, debug = _early_args(args)
    term = signal.signal(signal.SIGTERM, _terminate) if threading.current_thread() is threading.main_thread() else None
    formatwarning = warnings.formatwarning
    if not debug:
        warnings.formatwarning = _format_warning
    try:
        check_disabled(disabled)
        regs = build_registry(disabled=disabled)
        cli = build_cli(regs)
        cli.main(args=args, prog_name="clbench", standalone_mode=False)
    except ClbenchError as exc:
        if debug:
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):  # click turns Ctrl-C inside a command into Abort
        click.echo("interrupted: finished cells and checkpoints are kept; rerun the same command to resume", err=True)
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
        warnings.formatwarning = formatwarning
        if term is not None:
            signal.signal(signal.SIGTERM, term)


if __name__ == "__main__":
    main()
