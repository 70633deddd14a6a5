"""The command line: user mistakes end in one clear line and exit 2; results, show, leaderboard.

`clbench list` and `clbench list settings` are tested in test_cli_list.py."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import statistics
from pathlib import Path

import pandas as pd
import pytest

from clbench import testing
from clbench._cli.main import main
from clbench._tools import leaderboard

GRID = ["run", "--methods", "seqft,ewc", "--stream", "split-digits", "--orders", "1,2", "--seeds", "0,1",
        "--set", "train.epochs=1", "--no-progress"]


def clbench(capsys, *args):
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
        raise SystemExit(0)
    out = capsys.readouterr()
    return exit_.value.code or 0, out.out, out.err


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """GRID run once for the module, in a folder of its own: (its folder, exit code, stdout, stderr). The tests
    that read its cells work on a copy (`grid_copy`): the leaderboard commands write beside the results."""
    root = tmp_path_factory.mktemp("grid")
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, pytest.raises(SystemExit) as exit_:
        mp.chdir(root)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main([*GRID, "--out", "runs"])
            raise SystemExit(0)
    return root, exit_.value.code or 0, out.getvalue(), err.getvalue()


def grid_copy(grid, tmp_path, monkeypatch, *, orders=("1", "2")) -> None:
    """The grid's cells of `orders` as tmp_path/runs, tmp_path the working directory."""
    skip = [f"order-{o}" for o in ("1", "2") if o not in orders]
    shutil.copytree(grid[0] / "runs", tmp_path / "runs", ignore=shutil.ignore_patterns(*skip))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "--methods", "ewcc"], "unknown method 'ewcc' — did you mean 'ewc'?"),
        (["run", "--stream", "permuted-digit"], "did you mean 'permuted-digits'"),
        (["run", "--profile", "quik"], "unknown profile 'quik'"),
        (["run", "--orders", "9", "--stream", "split-digits"], "unknown order '9' of stream 'split-digits' Known orders: 1, 2, 3"),
        (["run", "--set", "ewc.lambd=3", "--methods", "ewc"], "unknown setting 'lambd' for EWCConfig — did you mean 'lambda'?"),
        (["run", "--set", "ewc.lambda=abc", "--methods", "ewc"], "ewc.lambda: expected a number, got 'abc'"),
        (["run", "--set", "ewcc.lambda=3"], "unknown scope 'ewcc'"),
        (["run", "--set", "train.epochs"], "expected SCOPE.FIELD=VALUE"),
        (["run", "--set", "train.optimizer=lbfgs"], "train.optimizer='lbfgs'"),
        (["run", "--set", "metrics.tolerance=2"], "metrics.tolerance=2.0 is out of range: it must be >= 0 and < 1"),
        (["run", "--seeds", "a"], "--seeds 'a'"),
        (["run", "--executor", "slurm", "--methods", "seqft"], "unknown executor 'slurm'"),
        (["run", "--methods", "seqft+joint"], "cannot be composed"),
        (["list", "methodz"], "Invalid value"),
        (["run", "--stream", "split-digits", "--model", "org/weights"], "--model org/weights: no model plugin has this name (`clbench list models`), and as a path of weights: no planned model takes"),
        (["run", "--stream", "split-digits", "--data-dir", "."], "--data-dir .: no planned stream reads"),
        (["run", "--model", "a/b", "--model-path", "c"], "--model a/b is a path or hub name"),
    ],
)
def test_user_mistakes_are_one_clear_line(capsys, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    code, out, err = clbench(capsys, *args)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # validation happens before any training


def test_debug_shows_the_traceback(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception, match="unknown method"):
        main(["run", "--methods", "ewcc", "--debug"])


def test_list_names_distributions(capsys):
    code, out, _ = clbench(capsys, "list")
    assert code == 0
    for needle in ("methods:", "ewc", "permuted-digits", "AA", "quick", "local", "(plugin ewc, clbench 0.1.0)",
                   "(plugin clbench.local, clbench 0.1.0)"):
        assert needle in out


def test_grid_show_and_deterministic_leaderboard(grid, capsys, tmp_path, monkeypatch):
    grid_copy(grid, tmp_path, monkeypatch)
    _, code, out, err = grid
    assert code == 0, err
    cells = sorted(p.relative_to(tmp_path / "runs").as_posix() for p in (tmp_path / "runs").rglob("result.json"))
    assert cells == [f"split-digits/{m}/order-{o}/seed-{s}/result.json"
                     for m in ("ewc", "seqft") for o in (1, 2) for s in (0, 1)]
    # a compact summary, no leaderboard: the ranked table on stdout (as the leaderboard's summary), the command that
    # makes a leaderboard just before the last line
    from clbench._core.results import iter_results
    from clbench._tools.leaderboard import console_summary

    assert out == "\n" + console_summary(iter_results(tmp_path / "runs"), testing.registry().methods.items) + "\n"
    assert out.startswith("\nsplit-digits — task-incremental") and "#### AA" not in out + err
    assert err.splitlines()[-2:] == ["results: runs/; leaderboard: clbench leaderboard runs (writes runs/leaderboard/)", "clbench: 8 cells: 8 complete; 0 reused; exit 0"]
    assert not (tmp_path / "runs" / "leaderboard.md").exists()

    result = json.loads((tmp_path / "runs/split-digits/ewc/order-1/seed-0/result.json").read_text())
    tuned = json.loads((Path(__file__).resolve().parent.parent / "plugins/_shared/tuned/quick.json").read_text())["methods"]["ewc"]
    assert result["config"]["methods"]["ewc"]["lambda"] == tuned["quick/split-digits"]["lambda"]  # the preset reached it
    assert result["config"]["train"]["epochs"] == 1  # --set won over the preset
    assert result["env"]["world_size"] == 1 and result["env"]["global_batch_size"] == 32

    code, out, _ = clbench(capsys, "show", "runs/split-digits/ewc/order-1/seed-0")
    assert code == 0 and "after 0-1" in out and "F.Ra" in out

    code, _, err = clbench(capsys, "leaderboard", "runs", "--out", "lb", "--no-plots")
    assert code == 0, err
    first = (tmp_path / "lb" / "quick.md").read_bytes()
    (tmp_path / "lb" / "quick.md").unlink()
    clbench(capsys, "leaderboard", "runs", "--out", "lb", "--no-plots")
    assert (tmp_path / "lb" / "quick.md").read_bytes() == first
    code, _, _ = clbench(capsys, "leaderboard", "runs", "--out", "lb", "--check")
    assert code == 0
    (tmp_path / "lb" / "quick.md").write_text("stale")
    code, _, err = clbench(capsys, "leaderboard", "runs", "--out", "lb", "--check")
    assert code == 1 and "stale" in err

    text = first.decode()
    # mean ± std over the two seeds, with a link to the order's directory
    ewc = json.loads((tmp_path / "runs/split-digits/ewc/order-1/seed-0/result.json").read_text())["metrics"]["AA"]
    ewc1 = json.loads((tmp_path / "runs/split-digits/ewc/order-1/seed-1/result.json").read_text())["metrics"]["AA"]
    assert f"{(ewc + ewc1) / 2:.2f} ± {abs(ewc - ewc1) / 2 ** 0.5:.2f}" in text
    assert "](../runs/split-digits/ewc/order-1)" in text
    # OO is a LoRA metric: n/a for seqft and ewc alike, so the dense diagnostics have no OO column; GSR applies to
    # both, in the diagnostics table (never a ranked metric table of its own)
    diagnostics = text.split("#### Diagnostics — dense footprints (never ranked)")[1]
    assert "OO ↓" not in diagnostics and "GSR ↓" in diagnostics and "#### GSR" not in text


def test_corrupt_and_foreign_results_are_skipped_with_a_warning(grid, capsys, tmp_path, monkeypatch):
    grid_copy(grid, tmp_path, monkeypatch, orders=["1"])
    bad = tmp_path / "runs" / "junk" / "result.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    foreign = tmp_path / "runs" / "foreign" / "result.json"
    foreign.parent.mkdir(parents=True)
    foreign.write_text(json.dumps({"hello": 1}))
    future = tmp_path / "runs" / "future" / "result.json"
    future.parent.mkdir(parents=True)
    future.write_text(json.dumps({"schema_version": 99}))
    code, out, err = clbench(capsys, "leaderboard", "runs", "--no-plots")
    assert code == 0
    assert "junk/result.json: cannot read" in err
    assert "foreign/result.json: not a clbench result" in err
    assert "schema_version 99 is newer" in err
    assert "seqft" in (tmp_path / "runs" / "leaderboard" / "quick.md").read_text()  # beside the results it is of
    assert not (tmp_path / "leaderboards").exists()


def test_plots_are_written(grid, capsys, tmp_path, monkeypatch):
    grid_copy(grid, tmp_path, monkeypatch, orders=["1"])
    code, _, err = clbench(capsys, "leaderboard", "runs", "--heatmaps")
    assert code == 0, err
    png = tmp_path / "runs" / "leaderboard" / "plots" / "quick-split-digits-accuracy.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((tmp_path / "runs" / "leaderboard" / "plots" / "heatmaps").rglob("*.png"))
    code, out, _ = clbench(capsys, "show", "runs/split-digits/seqft/order-1/seed-0/result.json", "--plot", "h.png")
    assert code == 0 and (tmp_path / "h.png").exists()


def test_model_flag_takes_a_path_or_hub_name_for_the_streams_model(capsys, tmp_path, monkeypatch):
    from clbench._exec import executors

    planned = []
    monkeypatch.setattr(executors, "execute", lambda plan, *a, **k: planned.append(plan) or [])
    weights = tmp_path / "my-minilm"
    weights.mkdir()
    for value in (str(weights), "sentence-transformers/all-MiniLM-L6-v2"):
        clbench(capsys, "run", "--stream", "cl-quick", "--methods", "seqlora", "--orders", "1", "--model", value,
                "--no-leaderboard", "--out", str(tmp_path / "runs"))
        cell = planned[-1].cells[0]
        assert (cell.model, cell.model_config["name_or_path"]) == ("encoder", value)


def test_run_writes_its_leaderboard_when_asked(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["run", "--methods", "seqft", "--stream", "split-digits", "--orders", "1", "--seeds", "0", "--set",
            "train.epochs=1", "--no-progress", "--out", "o"]
    code, out, err = clbench(capsys, *args, "--leaderboard")
    assert code == 0, err
    [row] = [line.split() for line in out.splitlines() if line.startswith("1 ")]
    assert row[1] == "seqft" and row[-1] == "best"  # one row: the best of one
    assert err.splitlines()[-2:] == ["results: o/; leaderboard: wrote o/leaderboard.md", "clbench: 1 cell: 1 complete; 0 reused; exit 0"]
    text = (tmp_path / "o" / "leaderboard.md").read_text(encoding="utf-8")
    assert text.startswith("# profile `quick` (o)\n") and "#### AA" in text and "| seqft" in text
    assert "](split-digits/seqft/order-1/seed-0/result.json)" in text  # links relative to the file, in --out
    # the cell is complete: a rerun skips it, and --no-leaderboard (kept for old scripts) changes nothing
    code, again, err = clbench(capsys, *args, "--no-leaderboard")
    assert code == 0 and again == out and err.splitlines()[-2] == "results: o/; leaderboard: clbench leaderboard o (writes o/leaderboard/)"


@pytest.mark.parametrize("where", ["before", "after"])
def test_p_and_debug_are_group_options_given_anywhere(capsys, tmp_path, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    flags = ["-p", "no:lota", "--debug"]
    args = [*flags, "list", "methods"] if where == "before" else ["list", "methods", *flags]
    code, out, err = clbench(capsys, *args)
    assert code == 0, err
    assert "  ewc " in out and "lotto" not in out  # -p no:lota disabled lota and lotto
    with pytest.raises(Exception, match="unknown method"):  # --debug after `run`: the traceback, as before
        main(["run", "--methods", "ewcc", "--debug"])


def test_p_takes_no_name(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = clbench(capsys, "-p", "lota", "list")
    assert code == 2 and "-p lota: expected no:NAME, which disables plugin NAME" in err
    code, _, err = clbench(capsys, "list", "-p", "no:lotaa")
    assert code == 2 and "-p no:lotaa: no installed plugin is named 'lotaa' — did you mean 'lota'?" in err


def test_build_cli_puts_the_registries_in_the_context(capsys):
    from clbench._cli.main import build_cli
    from clbench._exec.local import harness_registry

    regs = harness_registry()
    cli = build_cli(regs)
    assert sorted(cli.commands) == ["compare", "doctor", "leaderboard", "list", "metrics", "run", "show", "stale", "tune",
                                    "verify", "versus"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(["list", "profiles", "--debug"], prog_name="clbench")
    assert exit_.value.code == 0
    assert "quick" in capsys.readouterr().out
    # -p and --debug are declared once, on the group; `run` has the options plugins add (ray's --address)
    assert {p.name for p in cli.params} >= {"plugins", "debug"}
    run_params = {p.name for p in cli.commands["run"].params}
    assert not {"plugins", "debug"} & run_params
    assert {spec.name.replace("-", "_") for spec in regs.options.values()} <= run_params


def test_leaderboard_exports_the_summary_as_numbers_and_show_opens_a_multi_seed_link(grid, capsys, tmp_path,
                                                                                      monkeypatch):
    grid_copy(grid, tmp_path, monkeypatch, orders=["1"])  # seqft and ewc, seeds 0 and 1, order 1
    code, out, err = clbench(capsys, "leaderboard", "runs", "--format", "md,csv,json,latex", "--no-plots")
    assert code == 0, err
    board = tmp_path / "runs" / "leaderboard"
    csv = pd.read_csv(board / "quick.csv")
    records = json.loads((board / "quick.json").read_text())
    for method in ("seqft", "ewc"):  # AA mean ± sample std over the two seeds, from the result files themselves
        aa = [json.loads(p.read_text())["metrics"]["AA"]
              for p in sorted((tmp_path / "runs" / "split-digits" / method).rglob("result.json"))]
        row = csv[csv["method"] == method].iloc[0]
        assert row["AA mean"] == pytest.approx(statistics.mean(aa)) and row["AA std"] == pytest.approx(statistics.stdev(aa))
        assert [r["AA mean"] for r in records if r["method"] == method] == [pytest.approx(statistics.mean(aa))]
    tex = (board / "quick.tex").read_text()
    row = csv.iloc[0]  # AA as its mean and 95 % interval, F.Ra as mean ± std
    assert tex.startswith("\\begin{table}\n\\caption{split-digits") and "\\toprule" in tex
    assert (f"{row['AA mean']:.2f} [{row['AA ci low']:.2f}, {row['AA ci high']:.2f}]") in tex and "\\pm" in tex
    assert {"label", "bold", "BWT mean", "LA mean", "FWT std", "GSR mean"} <= set(csv.columns)  # every metric
    link = re.search(r"\]\((\.\./split-digits/seqft/order-1)\)", (board / "quick.md").read_text())
    assert link, "a row of two seeds links to its order folder"
    code, out, err = clbench(capsys, "show", str(board / link.group(1)))
    assert code == 0, err
    assert out.count("seqft · split-digits · order 1 · seed") == 2
    df = leaderboard.load(tmp_path / "runs")  # the Python API the README names
    assert set(df["method"]) == {"seqft", "ewc"} and set(df["seed"]) == {0, 1}



def test_leaderboard_takes_a_declared_reference_a_margin_and_filters(grid, capsys, tmp_path, monkeypatch):
    grid_copy(grid, tmp_path, monkeypatch, orders=["1"])  # seqft and ewc, seeds 0 and 1, order 1
    code, out, err = clbench(capsys, "leaderboard", "runs", "--format", "csv,latex", "--no-plots", "--reference",
                             "seqft", "--margin", "split-digits=3")
    assert code == 0, err
    board = tmp_path / "runs" / "leaderboard"
    csv = pd.read_csv(board / "quick.csv")
    assert set(csv["reference"]) == {"seqft"} and set(csv["margin"]) == {3.0}
    assert set(csv["margin from"]) == {"set by --margin split-digits"}
    assert dict(zip(csv["method"], csv["verdict"], strict=True))["seqft"] == "reference"
    tex = (board / "quick.tex").read_text()
    assert "against the declared reference seqft" in tex and "\\label{tab:split-digits-task-incremental}" in tex
    assert "Verdicts against the declared reference seqft" in (board / "quick.md").read_text()
    code, out, err = clbench(capsys, "leaderboard", "runs", "--no-plots", "--methods", "ewc", "--out", "only")
    assert code == 0, err
    text = (tmp_path / "only" / "quick.md").read_text()
    assert "| ewc " in text and "| seqft " not in text
    code, out, err = clbench(capsys, "leaderboard", "runs", "--no-plots", "--stream", "nope", "--out", "none")
    assert code == 2 and "--stream nope: no cell of nope in these results; they hold split-digits" in err
    # two trees side by side: rows METHOD@LABEL in one board, paired by order and seed (the same cells here)
    shutil.copytree(tmp_path / "runs", tmp_path / "again", ignore=shutil.ignore_patterns("leaderboard", "only"))
    code, out, err = clbench(capsys, "leaderboard", "runs", "again", "--label", "one", "--label", "two", "--no-plots",
                             "--methods", "ewc", "--format", "csv", "--out", "both")
    assert code == 0, err
    csv = pd.read_csv(tmp_path / "both" / "quick.csv")
    assert sorted(csv["method"]) == ["ewc@one", "ewc@two"] and set(csv["verdict"]) <= {"best", "equivalent"}
    code, out, err = clbench(capsys, "leaderboard", "runs", "again", "--label", "one", "--no-plots", "--out", "x")
    assert code == 2 and "1 labels for 2 result folders" in err


def test_stale_lists_results_of_other_code_data_or_settings_and_exits_1(grid, tmp_path, monkeypatch, capsys):
    """`clbench stale` passes a tree made by the code installed, then names each cell whose recorded code digest,
    data file or settings no longer match, and exits 1."""
    grid_copy(grid, tmp_path, monkeypatch)
    code, out, err = clbench(capsys, "stale", "runs")
    assert (code, out) == (0, ""), err
    assert "runs: 0 of 8 results made by other code or data" in err

    def tamper(cell: str, edit) -> None:
        path = tmp_path / "runs" / "split-digits" / cell / "result.json"
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))

    tamper("ewc/order-1/seed-0", lambda d: d["provenance"]["code"].update({"method:ewc": "0" * 64}))
    tamper("ewc/order-2/seed-1", lambda d: d["provenance"]["data"].update(
        {next(iter(d["provenance"]["data"])): "f" * 64}))
    tamper("seqft/order-1/seed-1", lambda d: d.update(config_hash="a" * 64))
    code, out, err = clbench(capsys, "stale", "runs", "--limit", "2")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "stale: runs/split-digits/ewc/order-1/seed-0: method ewc: its plugin's code changed"
    assert lines[1].startswith("stale: runs/split-digits/ewc/order-2/seed-1: data file pkg:")
    assert lines[1].endswith(" changed")
    assert lines[2] == "stale: ... and 1 more under runs"
    assert "runs: 3 of 8 results made by other code or data" in err
    code, out, err = clbench(capsys, "stale", "runs")
    assert "stale: runs/split-digits/seqft/order-1/seed-1: its recorded settings now hash to" in out
    # the leaderboard of such a tree says it is a record of other code; a current tree's says nothing of it
    code, out, err = clbench(capsys, "leaderboard", "runs", "--out", "boards", "--no-plots")
    assert code == 0, err
    page = next((tmp_path / "boards").glob("*.md")).read_text()
    assert "**A record of other code**: 3 of 8 cells were made by other code" in page
    shutil.rmtree(tmp_path / "boards")
    shutil.rmtree(tmp_path / "runs" / "split-digits" / "ewc")
    code, out, err = clbench(capsys, "leaderboard", "runs", "--out", "boards", "--no-plots")
    assert "A record of other code**: 1 of 4 cells" in next((tmp_path / "boards").glob("*.md")).read_text()
    shutil.rmtree(tmp_path / "runs" / "split-digits" / "seqft" / "order-1" / "seed-1")
    code, out, err = clbench(capsys, "leaderboard", "runs", "--out", "boards", "--no-plots")
    assert code == 0, err
    assert "A record of other code" not in next((tmp_path / "boards").glob("*.md")).read_text()


def test_stale_rerun_remakes_each_stale_cell_in_place_from_its_recorded_settings(grid, tmp_path, monkeypatch, capsys):
    """`clbench stale DIR --rerun`: a cell whose code digest is another's and one whose data digest is another's run
    again where they lie, from their recorded settings, giving the matrices the grid's run gave (the same code now);
    the other cells are not touched; a result whose settings hash to another cell is named and left."""
    grid_copy(grid, tmp_path, monkeypatch)
    runs = tmp_path / "runs" / "split-digits"

    def tamper(cell: str, edit) -> dict:
        path = runs / cell / "result.json"
        data = json.loads(path.read_text())
        before = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
        return before

    code_was = tamper("ewc/order-1/seed-0", lambda d: d["provenance"]["code"].update({"method:ewc": "0" * 64}))
    data_was = tamper("seqft/order-2/seed-1", lambda d: d["provenance"]["data"].update(
        {next(iter(d["provenance"]["data"])): "f" * 64}))
    tamper("seqft/order-1/seed-1", lambda d: d.update(config_hash="a" * 64))
    untouched = (runs / "ewc/order-2/seed-1/result.json").stat().st_mtime_ns
    code, out, err = clbench(capsys, "stale", "runs", "--rerun", "--jobs", "1", "--no-progress")
    assert code == 1  # the result of another cell's settings is still there
    assert "not rerun: runs/split-digits/seqft/order-1/seed-1: its recorded settings now hash to another" in err
    assert "clbench stale: rerunning 2 cells under runs/" in err and "2 cells: 2 complete" in err
    assert "runs: 1 of 8 results made by other code or data" in err
    for cell, was in (("ewc/order-1/seed-0", code_was), ("seqft/order-2/seed-1", data_was)):
        now = json.loads((runs / cell / "result.json").read_text())
        assert now["accuracy_matrix"] == was["accuracy_matrix"] and now["provenance"] == was["provenance"]
    assert (runs / "ewc/order-2/seed-1/result.json").stat().st_mtime_ns == untouched


def test_a_result_read_twice_is_checked_once_and_an_edit_is_checked_again(grid, tmp_path, monkeypatch):
    from clbench import cell
    from clbench._core import results
    from clbench._core.results import read_result
    from clbench.errors import ResultFileError

    grid_copy(grid, tmp_path, monkeypatch, orders=["1"])
    monkeypatch.setattr(results, "_VALIDATED", set())
    path = next((tmp_path / "runs").rglob("result.json"))
    checks = []
    real = cell.validate
    monkeypatch.setattr(cell, "validate", lambda data, p=None: checks.append(p) or real(data, p))
    first, second = read_result(path), read_result(path)
    assert len(checks) == 1 and first.accuracy_matrix == second.accuracy_matrix and first is not second
    data = json.loads(path.read_text())
    data["accuracy_matrix"][0][0] = "high"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultFileError, match="not a clbench result"):
        read_result(path)


def test_help_imports_no_numerical_library():
    """`clbench --help` prints from the commands' declarations: torch, pandas and scipy load only when a command
    that uses them runs (they took 2.6 s of a 2.9 s --help)."""
    import subprocess
    import sys

    code = ("import sys; from clbench._cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'pandas', 'scipy', 'numpy', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Usage: clbench" in done.stdout
    assert done.stdout.splitlines()[-1] == "[]"


@pytest.mark.parametrize(("args", "loads"), [(["leaderboard", "--help"], False), (["-p", "no:dgr", "stale", "-h"], False)])
def test_a_subcommands_help_loads_plugins_only_where_they_add_options(args, loads):
    """`clbench COMMAND --help` prints the command's own declarations: no plugin is loaded (torch is not imported),
    except for `run`, whose help lists the options plugins add; the screen is the one built with the plugins."""
    import subprocess
    import sys

    from click.testing import CliRunner

    from clbench._cli.main import build_cli
    from clbench._exec.local import harness_registry

    code = ("import sys; from clbench._cli.main import main\n"
            f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    *lines, imported = done.stdout.splitlines()
    assert imported == str(loads), done.stderr
    regs = harness_registry()
    command = [a for a in args if a in ("leaderboard", "stale", "run")]
    built = CliRunner().invoke(build_cli(regs), [*command, "--help"], obj=regs, prog_name="clbench")
    assert "".join("".join(lines).split()) == "".join(built.output.split())  # (the terminals' widths differ)


def _list_in_subprocess(cache, *args: str, env_extra: dict[str, str] | None = None):
    """`clbench list ARGS` in a fresh interpreter with the listing cache at ``cache``: its output, and which of
    torch and pandas it imported."""
    import os
    import subprocess
    import sys

    code = ("import sys; from clbench._cli.main import main\n"
            f"try:\n    main({list(args)!r})\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'pandas') if m in sys.modules))")
    env = {**os.environ, "CLBENCH_CACHE": str(cache), **(env_extra or {})}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    *lines, imported = done.stdout.splitlines()
    return "\n".join(lines), imported, done.stderr


def test_list_prints_from_a_cached_listing_without_importing_a_plugin(tmp_path, capsys):
    """The first `clbench list` builds the registries and keeps the listing; the next prints the same lines
    without importing torch; a changed plugin file makes a new listing (clbench._core.listing)."""
    from clbench._core import listing

    first, imported_first, _ = _list_in_subprocess(tmp_path, "list", "methods")
    assert "torch" in imported_first  # built: every plugin imported
    again, imported_again, _ = _list_in_subprocess(tmp_path, "list", "methods")
    assert (again, imported_again) == (first, "[]")
    # the listing is the registries' own: every registered method, once, with its plugin
    from clbench._exec.local import harness_registry

    regs = harness_registry()
    names = [line.split()[0] for line in first.splitlines()[1:]]
    assert names == list(regs.methods) and len(names) > 30
    plugins, imported, _ = _list_in_subprocess(tmp_path, "list", "plugins")
    assert imported == "[]"  # one listing holds every kind and the plugins: `list plugins` reads it too
    assert "  memory_budgets " in plugins
    # another key: a plugin disabled, or a plugin file changed
    assert listing.key(["ewc"]) != listing.key([])
    before = listing.key([])
    source = Path(listing.__file__).parent.parent / "specs.py"
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    try:
        assert listing.key([]) != before
    finally:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert listing.key([]) == before


def test_run_help_shows_the_plugins_options_from_the_cached_listing(tmp_path):
    """`clbench run --help` lists the options plugins add: the first builds the registries and keeps the listing,
    the next prints the same screen from it without importing torch; both are the screen built with the plugins."""
    from click.testing import CliRunner

    from clbench._cli.main import build_cli
    from clbench._exec.local import harness_registry

    first, imported_first, _ = _list_in_subprocess(tmp_path, "run", "--help")
    again, imported_again, _ = _list_in_subprocess(tmp_path, "run", "--help")
    assert "torch" in imported_first and imported_again == "[]"
    regs = harness_registry()
    built = CliRunner().invoke(build_cli(regs), ["run", "--help"], obj=regs, prog_name="clbench").output
    for screen in (first, again):
        assert "".join(screen.split()) == "".join(built.split())  # (the terminals' widths differ)
    assert "--logger LOGGER[,LOGGER...]" in again and "--cell-cpus FLOAT" in again  # a plugin's own type, by name


def test_a_broken_listing_cache_is_rebuilt(tmp_path):
    from clbench._core import listing

    first, _, _ = _list_in_subprocess(tmp_path, "list", "metrics")
    [cached] = (tmp_path / "listing").glob("*.json")
    cached.write_text("{not json", encoding="utf-8")
    again, imported, _ = _list_in_subprocess(tmp_path, "list", "metrics")
    assert again == first and "torch" in imported
    assert listing.Listing.from_json(json.loads(cached.read_text(encoding="utf-8"))).kinds["metrics"]


@pytest.mark.parametrize(("args", "listing"), [
    (["list"], True), (["list", "methods"], True), (["-p", "no:ray", "list", "plugins"], True),
    (["list", "--debug"], True), (["list", "settings", "ewc"], False), (["run", "--methods", "list"], False),
    (["leaderboard", "runs/"], False), (["run", "--help"], True), (["run", "--methods", "ewc", "-h"], True),
    (["run", "--", "-h"], False),
])
def test_only_a_plain_listing_reads_the_cache(args, listing):
    from clbench._cli.main import _listing_only

    assert _listing_only(args) is listing
