"""The local executor's worker processes (`clbench run --jobs N`): the same numbers as in one process, threads
never oversubscribed, plugins a worker cannot load refused, --fail-fast and usage errors as in one process."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from clbench import testing
from clbench._cli.main import main
from clbench._core.plan import RunRequest, make_plan
from clbench._exec import worker
from clbench._exec.executors import execute, run_one
from clbench._exec.local import LocalExecutor, harness_registry, next_cell
from clbench._exec.runner import FailFast
from clbench.config import TrainConfig
from clbench.errors import ClbenchError
from clbench.specs import ExecutorContext, Workers
from clbench.testing.running import _request

GRID = ["run", "--stream", "split-digits", "--methods", "seqft,ewc", "--orders", "1,2", "--seeds", "0",
        "--set", "train.epochs=1", "--no-progress"]


def _run(out: Path, jobs: int | str, fail_fast: bool = False, **sets: list) -> list:
    regs = harness_registry()  # no plugin of this process only: workers rebuild the same registries
    plan = make_plan(regs, RunRequest(methods="seqft,ewc", streams=["split-digits"], orders=["1", "2"], seeds=[0],
                                      out=out, sets={"train.epochs": [1], **sets}))
    return execute(plan, regs, fail_fast=fail_fast, progress=False, options={"jobs": jobs})


def _results(out: Path) -> dict[str, dict]:
    keep = ("accuracy_matrix", "metrics", "config_hash", "status")
    return {str(p.parent.relative_to(out)): {k: json.loads(p.read_text())[k] for k in keep}
            for p in sorted(out.rglob("result.json"))}


@pytest.mark.slow
def test_two_worker_processes_give_the_numbers_of_one_process(tmp_path):
    one, two = _run(tmp_path / "one", 1), _run(tmp_path / "two", 2)
    assert [r.key for r in two] == [r.key for r in one]  # plan order, whatever order the workers finished in
    a, b = _results(tmp_path / "one"), _results(tmp_path / "two")
    assert len(a) == 4 and all(r["status"] == "complete" for r in a.values())
    assert a == b  # matrices, metrics and hashes, exactly


def _cells(threads: list[int]):
    plan = make_plan(harness_registry(), RunRequest(methods="seqft", streams=["split-digits"], orders=["1", "2", "3"],
                                                  seeds=[0, 1]))
    return [replace(cell, train=TrainConfig(threads=t)) for cell, t in zip(plan.cells, threads, strict=False)]


def test_a_cell_starts_when_a_worker_and_its_threads_are_free():
    one, two, one_b, four = _cells([1, 2, 1, 4])
    assert next_cell([one, two], {}, jobs=2, cpus=2) is one
    assert next_cell([two, one_b], {one.key: 1}, jobs=2, cpus=2) is one_b  # two threads do not fit beside one
    assert next_cell([two], {one.key: 1}, jobs=2, cpus=2) is None  # wait for the running cell
    assert next_cell([two], {}, jobs=2, cpus=2) is two  # alone, it has both cores
    assert next_cell([one], {one_b.key: 1, two.key: 1}, jobs=2, cpus=4) is None  # every worker busy
    assert next_cell([four], {}, jobs=2, cpus=2) is four  # more threads than the machine: it runs alone
    assert next_cell([four, one], {four.key: 2}, jobs=2, cpus=2) is None


def _context(in_process: tuple[str, ...] = (), **options: object) -> ExecutorContext:
    """An executor's context with the run's executor ``options`` (no worker process is started here)."""
    return ExecutorContext(worker=Workers(worker.start, worker.run, run_one), options=options,
                           in_process_plugins=in_process)


def test_auto_runs_in_this_process_when_a_worker_could_not_load_a_plugin():
    cells = _cells([1, 1, 1])
    assert LocalExecutor(_context(jobs="auto", in_process=("clbench.testing.TinyPlugin",))).workers(cells) == 1
    assert LocalExecutor(_context(jobs="auto")).workers(cells[:1]) == 1  # one cell: no worker to start
    assert LocalExecutor(_context()).workers(cells) == 1  # the API's default: this process
    with pytest.raises(ClbenchError, match=r"--jobs 2: plugins registered in this process only "
                                           r"\(clbench.testing.TinyPlugin\) would be missing"):
        LocalExecutor(_context(jobs=2, in_process=("clbench.testing.TinyPlugin",))).workers(cells)


def test_auto_is_one_process_for_cells_on_a_gpu():
    cells = [replace(c, train=TrainConfig(device="cuda")) for c in _cells([1, 1])]
    assert LocalExecutor(_context(jobs="auto")).workers(cells) == 1


def test_tests_in_this_process_still_run_with_jobs_auto(tmp_path):
    regs = testing.registry()  # the tiny plugin lives in this process only
    plan = make_plan(regs, _request(tmp_path, "seqft,ewc", "tiny-vector"))
    results = execute(plan, regs, progress=False, options={"jobs": "auto"})
    assert [r.status for r in results] == ["complete", "complete"]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where train.device=cuda fails")
def test_fail_fast_stops_the_workers(tmp_path):
    with pytest.raises(FailFast, match=r"stopped at the first failed cell \(--fail-fast\): split-digits/"):
        _run(tmp_path, 2, fail_fast=True, **{"train.device": ["cuda"]})


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_jobs_value_is_a_usage_error(value, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*GRID, "--jobs", value, "--out", str(tmp_path)])
    assert exit_.value.code == 2 and "Invalid value for '--jobs' / '-j'" in capsys.readouterr().err


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_worker_killed_mid_cell_ends_the_run_with_its_cell_named(tmp_path):
    """A process pool never reports the task of a worker killed outright (the out-of-memory killer): the run
    waited for it forever. It now stops within seconds, naming the cell, and keeps what finished."""
    import signal
    import subprocess
    import sys
    import time

    cells = ["run", "--stream", "permuted-digits", "--methods", "seqft,ewc", "--orders", "1", "--seeds", "0,1",
             "--set", "train.epochs=30", "--set", "train.checkpoint_every_s=0",  # a checkpoint after each task
             "--no-progress", "--jobs", "2", "--out", str(tmp_path)]
    proc = subprocess.Popen([sys.executable, "-m", "clbench", *cells], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list(tmp_path.rglob("checkpoint.pt")) and time.monotonic() < deadline:  # a cell under way
        time.sleep(0.5)
    busy = sorted(tmp_path.rglob("checkpoint.pt"))
    assert busy, "no cell started"
    workers = [p for p in _children(proc.pid) if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()]
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the run still waits for the killed worker's cell")
    assert proc.returncode == 1, err
    [line] = [line for line in err.splitlines() if "died without a result" in line]
    assert re.search(rf"cell \S+ \(pid {workers[0]}\) died", line), line
    assert "rerun the same command to resume" in line


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_end_when_their_parent_is_killed(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    long_cells = ["run", "--stream", "permuted-digits", "--methods", "seqft", "--orders", "1,2", "--set",
                  "train.epochs=60", "--no-progress"]  # ~20 s a cell: the workers are mid-cell at the kill
    proc = subprocess.Popen([sys.executable, "-m", "clbench", *long_cells, "--jobs", "2", "--out", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(workers := [p for p in _children(proc.pid) if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()
                          ]) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(workers) == 2, "the run did not start its two workers"
    time.sleep(6)  # start-up done, cells under way
    proc.send_signal(signal.SIGKILL)  # no chance to stop them
    proc.wait()
    def alive(pid: int) -> bool:  # a zombie (exited, not yet reaped by init) counts as gone
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + 5
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in workers if alive(p)]  # gone within ~1 s, not after their cells
