"""Faults: SIGKILL at random points, two runs on one directory, an output directory we cannot write."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clbench._cli.main import main

GRID = ["run", "--methods", "seqft,ewc", "--stream", "split-digits", "--orders", "1,3", "--seeds", "0",
        "--set", "train.epochs=1", "--set", "train.checkpoint_every_s=0",  # kills land between checkpoints
        "--no-progress", "--no-leaderboard"]


def _cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "clbench", *GRID, "--out", str(out)]


def _matrices(out: Path) -> dict[str, list]:
    return {str(p.relative_to(out)): json.loads(p.read_text())["accuracy_matrix"] for p in sorted(out.rglob("result.json"))}


@pytest.mark.slow
def test_sigkill_at_random_points_then_rerun_gives_identical_results(tmp_path):
    reference = tmp_path / "reference"
    subprocess.run(_cmd(reference), check=True, capture_output=True, timeout=300)
    expected = _matrices(reference)
    assert len(expected) == 4
    rng = random.Random(7)
    survived, trials = 0, 4
    for trial in range(trials):
        out = tmp_path / f"trial{trial}"
        proc = subprocess.Popen(_cmd(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # start-up is ~2.5 s and the grid takes a few seconds more: one kill at a random point of each quarter of
        # that span, so that the few trials still cover before, between and during the cells
        time.sleep(2.5 + 4.5 * (trial + rng.random()) / trials)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for p in out.rglob("*.tmp"):  # a kill mid-write leaves at most a temp file, never a torn result
            assert p.name.startswith(".")
        for p in out.rglob("result.json"):
            json.loads(p.read_text())
        subprocess.run(_cmd(out), check=True, capture_output=True, timeout=300)
        assert _matrices(out) == expected, f"trial {trial} differs"
        survived += 1
    assert survived == trials


def test_second_run_on_the_same_directory_refuses(tmp_path, capsys):
    from filelock import FileLock

    out = tmp_path / "runs"
    out.mkdir()
    with FileLock(str(out / ".clbench.lock")):
        with pytest.raises(SystemExit) as exit_:
            main([*GRID, "--out", str(out)])
    assert exit_.value.code == 2
    assert "another clbench run is writing to" in capsys.readouterr().err
    assert not list(out.rglob("result.json"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_output_directory_is_a_clear_error(tmp_path, capsys):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    try:
        with pytest.raises(SystemExit) as exit_:
            main([*GRID, "--out", str(out)])
    finally:
        out.chmod(0o700)
    assert exit_.value.code == 2
    assert "cannot write" in capsys.readouterr().err


def test_unwritable_output_path_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(SystemExit) as exit_:
        main([*GRID, "--out", str(blocker / "runs")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "cannot write results to" in err and "Traceback" not in err


def test_data_paths_stay_inside_the_data_directory(tmp_path):
    from clbench.data import confined
    from clbench.errors import DataError

    root = tmp_path / "data"
    (root / "TC" / "agnews").mkdir(parents=True)
    outside = tmp_path / "secret"
    outside.mkdir()
    (root / "TC" / "escape").symlink_to(outside)
    assert confined(root, "TC", "agnews") == (root / "TC" / "agnews").resolve()
    for parts in (("..", "secret"), ("TC", "..", "..", "secret"), (str(outside),), ("TC", "escape")):
        with pytest.raises(DataError, match="outside the data directory"):
            confined(root, *parts)


def test_an_atomic_write_gives_the_umask_mode_without_touching_the_umask(tmp_path, monkeypatch):
    """A cell writes its footprint file in a worker thread: reading the umask (by setting it) there would
    change it for the whole process meanwhile."""
    from clbench.data import atomic_write_with

    old = os.umask(0o027)
    try:
        def no_umask(mask: int) -> int:
            raise AssertionError("the umask was changed during a write")

        monkeypatch.setattr(os, "umask", no_umask)
        atomic_write_with(tmp_path / "a.json", lambda tmp: tmp.write_text("{}"))
        atomic_write_with(tmp_path / "b.bin", lambda tmp: tmp.write_bytes(b"x"), durable=False)
        monkeypatch.undo()
    finally:
        os.umask(old)
    assert {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()} == {"a.json": 0o640, "b.bin": 0o640}


def _slow_atomic_write(directory: str) -> None:
    """In a ``--jobs`` worker: a file half written when the parent ends the pool."""
    from clbench.data import atomic_write_with

    def write(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        (Path(directory) / "writing").touch()
        time.sleep(60)

    atomic_write_with(Path(directory) / "result.json", write)


@pytest.mark.slow
def test_terminating_the_jobs_pool_leaves_no_temp_file(tmp_path, capfd):
    """`clbench run` ends its --jobs workers with ``Pool.terminate`` (SIGTERM) on an interrupt: a worker in the
    middle of writing a file deletes its temp file rather than dying where it stands (CI saw a footprint file's
    temp left after the fault suite's SIGTERM, when the second cell was writing as the first finished)."""
    import multiprocessing

    from clbench._exec import worker

    pool = multiprocessing.get_context("spawn").Pool(1, worker.start, ((), False))
    try:
        pool.apply_async(_slow_atomic_write, (str(tmp_path),))
        deadline = time.monotonic() + 120
        while not (tmp_path / "writing").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p.name for p in tmp_path.glob(".result.json.*.tmp")], "the worker never started writing"
    finally:
        started = time.monotonic()
        pool.terminate()
        pool.join()
    assert time.monotonic() - started < 30  # ended, not waited out (the write sleeps 60 s)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["writing"]
    assert "Traceback" not in capfd.readouterr().err  # an exit, quietly: the parent prints the one line
