"""Data-parallel cells (`clbench run --nproc N`): two gloo ranks on the CPU give the numbers of one process at the
same global batch, for every registered method that declares it can run data-parallel (``MethodSpec.data_parallel``),
and every other is refused before a cell starts; rank 0 alone writes; a killed cell resumes; bad settings are refused.

Two ranks run micro-batches 0 and 1 of the global batch and sum their gradients: the arithmetic of one process
with train.grad_accum=2, so the results must be *bit-identical* to that run. Against one process without
accumulation only the float summation order of the mean gradient differs (as tests/test_grad_accum.py measures
for accumulation itself).
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from clbench import footprints as fps
from clbench import testing
from clbench._cli.main import main
from clbench._core.plan import make_plan
from clbench._exec.executors import execute
from clbench.cell import CHECKPOINT_FILE, FOOTPRINT_FILE, RESULT_FILE, CellResult, config_diff, identity
from clbench.errors import ClbenchError
from clbench.testing.running import _request, fitting_stream

# Every method the quick profile runs on split-digits (replay runs on tiny-vector, see REPLAY), and the LoRA family
# on the tiny text stream (O-LoRA's earlier adapters, IncLoRA's merges, MTL's joint data, per-task adapters).
DIGITS = ("dense-ewc", "ewc", "expander", "expander-ewc", "joint", "lota", "lotto", "lps", "lwf", "packnet",
          "pertask-expander", "pertask-random", "random-mask-ewc", "seqft")
# Replay draws its replayed examples per micro-batch; with two ranks each takes its slice of one draw, which is
# what one process with grad_accum=2 draws when the two micro-batches have equal sizes. split-digits' tasks have
# odd sizes (a last batch of 3 cuts into 2 + 1), tiny-vector's 64 examples cut into batches of 16 evenly.
REPLAY = ("replay",)
LORA = ("inclora", "mtl", "nlora", "olora", "pertask", "seqlora")
NO_DROPOUT = {f"{m}.dropout": [0.0] for m in LORA}  # LoRA dropout's masks fall on other examples in each rank


def _grid(out: Path, nproc: int | None, accum: int) -> dict[str, CellResult]:
    regs = testing.registry()
    sets = {"train.grad_accum": [accum]}
    # one learning rate for every method (not its tuned preset): a large step amplifies the summation order's last
    # bits chaotically, and this test is about the arithmetic of the ranks, not about the presets
    results = testing.run(regs, out / "digits", ",".join(DIGITS), "split-digits", profile="quick", orders=["1"],
                          sets={**sets, "train.epochs": [1], "train.lr": [0.0125]}, nproc=nproc)
    results += testing.run(regs, out / "vector", ",".join(REPLAY), "tiny-vector", sets=sets, nproc=nproc)
    results += testing.run(regs, out / "text", ",".join(LORA), "tiny-text", sets={**sets, **NO_DROPOUT}, nproc=nproc)
    return {r.method: r for r in results}


@pytest.fixture(scope="module")
def grids(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, CellResult]]:
    root = tmp_path_factory.mktemp("ddp")
    return {"two ranks": _grid(root / "n2", 2, 1), "accumulated": _grid(root / "n1k2", None, 2),
            "one": _grid(root / "n1", None, 1)}


# Every registered method, from the registry (not a hand list): a method a plugin adds is covered when it registers.
REGISTERED = sorted(testing.registry().methods)


def _data_parallel(method: str) -> bool:
    return testing.registry().methods.get(method).data_parallel


def _tiny_grid(out: Path, methods: list[str], nproc: int | None, accum: int) -> dict[str, CellResult]:
    """``methods`` on the tiny stream that fits each (the kit's test profile), on ``nproc`` ranks or one process
    accumulating ``accum`` micro-batches; a dropout a method's config has is off (each rank would draw its masks
    for other examples than one process does)."""
    regs = testing.registry()
    by_stream: dict[str, list[str]] = {}
    for m in methods:
        stream = fitting_stream(regs, m)
        assert stream is not None, f"no tiny stream fits method {m!r}"
        by_stream.setdefault(stream, []).append(m)
    out_results: dict[str, CellResult] = {}
    for stream, ms in sorted(by_stream.items()):
        sets: dict[str, list[object]] = {"train.grad_accum": [accum]}
        for m in ms:
            if any(f.name == "dropout" for f in dataclasses.fields(regs.methods.get(m).config_cls)):
                sets[f"{m}.dropout"] = [0.0]
        for r in testing.run(regs, out / stream, ",".join(ms), stream, sets=sets, nproc=nproc):
            out_results[r.method] = r
    return out_results


@pytest.fixture(scope="module")
def tiny_grids(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, CellResult]]:
    root = tmp_path_factory.mktemp("ddp-registry")
    methods = [m for m in REGISTERED if _data_parallel(m)]
    return {"two ranks": _tiny_grid(root / "n2", methods, 2, 1), "accumulated": _tiny_grid(root / "n1k2", methods,
                                                                                             None, 2)}


@pytest.mark.slow
@pytest.mark.parametrize("method", [m for m in REGISTERED if _data_parallel(m)])
def test_every_data_parallel_method_gives_the_numbers_of_one_process_accumulating(method, tiny_grids):
    """Two gloo ranks and one process with train.grad_accum=2 do the same arithmetic: bit for bit, the report too
    (a buffer filled on each rank from its own micro-batches would differ: DER's, ER-ACE's)."""
    two, accumulated = tiny_grids["two ranks"][method], tiny_grids["accumulated"][method]
    assert two.status == accumulated.status == "complete", (two.error, accumulated.error)
    assert two.env["world_size"] == 2 and accumulated.env["world_size"] == 1
    assert two.accuracy_matrix == accumulated.accuracy_matrix
    assert two.metrics == accumulated.metrics
    assert two.footprints.get("sha256") == accumulated.footprints.get("sha256")
    assert two.report == accumulated.report


@pytest.mark.parametrize("method", REGISTERED)
def test_a_method_that_cannot_run_data_parallel_is_refused_before_any_cell_starts(method, tmp_path):
    regs = testing.registry()
    stream = fitting_stream(regs, method)
    assert stream is not None
    plan = make_plan(regs, _request(tmp_path, method, stream))
    if _data_parallel(method):  # the refusal names only the methods that declare it
        from clbench._exec.executors import check_data_parallel

        check_data_parallel(plan, regs, 2, "local", {"rank_plugins": ["clbench.testing:TinyPlugin"]})
        return
    with pytest.raises(ClbenchError) as refused:
        testing.run(regs, tmp_path, method, stream, nproc=2)
    assert str(refused.value).startswith(f"--nproc 2: method {method!r} cannot run data-parallel")
    assert "\n" not in str(refused.value)
    assert not any(tmp_path.rglob(RESULT_FILE)) and not any(tmp_path.rglob(CHECKPOINT_FILE))


def _footprints(result: CellResult) -> dict[str, torch.Tensor]:
    assert result.path is not None
    return fps.to_tensors(fps.load(result.path.parent / FOOTPRINT_FILE, result.footprints))


def _differences(a: CellResult, b: CellResult) -> tuple[float, float, float]:
    """Max |Δ| of the accuracy matrices (pp), max relative |Δ| of the metrics, max |Δ| of the footprints."""
    matrix = max(abs(x - y) for ra, rb in zip(a.accuracy_matrix, b.accuracy_matrix, strict=True)
                 for x, y in zip(ra, rb, strict=True))
    assert a.metrics.keys() == b.metrics.keys()
    metrics = max((abs(a.metrics[k] - b.metrics[k]) / max(abs(b.metrics[k]), 1e-9) for k in a.metrics
                   if a.metrics[k] is not None and b.metrics[k] is not None), default=0.0)
    fa, fb = _footprints(a), _footprints(b)
    assert fa.keys() == fb.keys()
    foot = max((float((fa[k].double() - fb[k].double()).abs().max()) for k in fa if fa[k].numel()), default=0.0)
    return matrix, metrics, foot


@pytest.mark.slow
@pytest.mark.parametrize("method", DIGITS + REPLAY + LORA)
def test_two_ranks_give_the_numbers_of_one_process_at_the_same_global_batch(method, grids):
    two, accumulated, one = (grids[k][method] for k in ("two ranks", "accumulated", "one"))
    for r in (two, accumulated, one):
        assert r.status == "complete", r.error
    # the same arithmetic as one process accumulating the two micro-batches: bit for bit
    assert two.accuracy_matrix == accumulated.accuracy_matrix
    assert two.metrics == accumulated.metrics
    assert two.footprints["sha256"] == accumulated.footprints["sha256"]
    # one process, one pass over the batch: the float summation order of the mean gradient only. Measured max
    # over every method: matrix 0 pp, metrics 1.1e-4 relative (joint; the others ≤ 1.2e-7), footprints 1.2e-3
    # (joint's, whose entries reach 3.4; the others ≤ 6e-5).
    matrix, metrics, foot = _differences(two, one)
    assert matrix <= 1.0  # an argmax a last bit flips moves one test example: ≤ 0.93 pp on split-digits
    assert metrics <= 1e-3
    assert foot <= 5e-3
    assert (two.env["world_size"], two.env["global_batch_size"], two.env["grad_accum"]) == \
        (2, one.env["global_batch_size"], 1)
    assert two.env["per_device_batch_size"] == one.env["global_batch_size"] // 2
    assert (one.env["world_size"], accumulated.env["world_size"]) == (1, 1)
    # the ranks are part of the identity (they round like grad_accum=2, not like one process), recorded only when
    # more than one: the one-process cell's hash is what it always was
    assert (two.config["nproc"], "nproc" in one.config) == (2, False)
    assert config_diff(identity(one.config, one.stream, one.order, one.seed),
                       identity(two.config, two.stream, two.order, two.seed)) == ["nproc: (absent) → 2"]


@pytest.mark.slow
def test_the_two_rank_runs_differ_from_one_process_where_they_should(grids):
    """The comparisons above can fail: one process without accumulation is not bit-identical (the tolerance is
    needed), and the LoRA family with dropout is not equal at all (each rank draws masks for other examples)."""
    moved = [m for m in DIGITS if grids["two ranks"][m].footprints["sha256"] != grids["one"][m].footprints["sha256"]]
    assert len(moved) >= len(DIGITS) // 2


def _files(root: Path) -> list[str]:
    """The files under ``root``, a tensorboard event file named ``events`` (its name holds the time and the pid)."""
    return sorted(str(p.relative_to(root).parent / ("events" if "tfevents" in p.name else p.name))
                  for p in root.rglob("*") if p.is_file() and p.name != ".clbench.lock")


@pytest.mark.slow
def test_rank_zero_alone_writes_results_checkpoints_and_logs(tmp_path):
    regs = testing.registry()
    sets = {"train.log_every": [1], "train.checkpoint_every_s": [0]}
    options = {"logger": "csv,tensorboard"}
    [two] = testing.run(regs, tmp_path / "two", "ewc", sets=sets, options=options, nproc=2)
    [one] = testing.run(regs, tmp_path / "one", "ewc", sets={**sets, "train.grad_accum": [2]}, options=options)
    assert two.status == one.status == "complete"
    # the same files as one process: one result, one footprint file, one csv, one tensorboard event file
    assert _files(tmp_path / "two") == _files(tmp_path / "one")
    assert len(list((tmp_path / "two").rglob("*tfevents*"))) == 1
    log_two = (two.path.parent / "log.csv").read_text().splitlines()
    log_one = (one.path.parent / "log.csv").read_text().splitlines()
    # header, 2 tasks × 2 epochs × 4 steps, 2 tasks × 2 epochs' mean losses, 2 tasks, metrics
    assert len(log_two) == len(log_one) == 1 + 16 + 4 + 2 + 1
    # the logged losses are the global batch's (summed over the ranks), as one process logs them
    assert [row.split(",")[:6] for row in log_two] == [row.split(",")[:6] for row in log_one]


class KillAfterFirstTask(testing.KillAfterTask):
    """Loaded by the ranks by name (``rank_plugins``): rank 0's observer interrupts the cell after task 1."""

    def __init__(self) -> None:
        super().__init__(0)


@pytest.mark.slow
def test_a_killed_data_parallel_cell_resumes_to_the_same_numbers(tmp_path):
    regs = testing.registry()
    sets = {"train.checkpoint_every_s": [0]}
    plan = make_plan(regs, _request(tmp_path / "killed", "lwf", "tiny-vector", sets=sets))
    killer = f"{__name__}:{KillAfterFirstTask.__name__}"
    tiny = "clbench.testing:TinyPlugin"
    with pytest.raises(KeyboardInterrupt):
        execute(plan, regs, progress=False, options={"nproc": 2, "rank_plugins": [tiny, killer]})
    [checkpoint] = (tmp_path / "killed").rglob(CHECKPOINT_FILE)
    assert not any((tmp_path / "killed").rglob(RESULT_FILE))
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["done"] == 1
    [resumed] = testing.run(regs, tmp_path / "killed", "lwf", sets=sets, nproc=2)
    # uninterrupted: one process accumulating the ranks' two micro-batches (bit-identical, as tested above)
    [straight] = testing.run(regs, tmp_path / "straight", "lwf", sets={**sets, "train.grad_accum": [2]})
    assert resumed.status == straight.status == "complete"
    assert resumed.timings["tasks"][0] == saved["timings"][0]  # task 1 came from the checkpoint, not run again
    assert resumed.accuracy_matrix == straight.accuracy_matrix
    assert resumed.metrics == straight.metrics
    assert resumed.footprints["sha256"] == straight.footprints["sha256"]
    assert not checkpoint.exists()


GRID = ["run", "--stream", "split-digits", "--methods", "seqft", "--orders", "1", "--seeds", "0",
        "--set", "train.epochs=1", "--no-progress"]  # the quick profile: a global batch of 32


@pytest.mark.parametrize("args, message", [
    (["--nproc", "0"], "Invalid value for '--nproc': 0 is not in the range x>=1"),
    (["--nproc", "3"], "train.batch_size=32 does not split into 3 ranks × train.grad_accum=1 equal micro-batches"),
    (["--nproc", "2", "--set", "train.grad_accum=32"],
     "train.batch_size=32 does not split into 2 ranks × train.grad_accum=32 equal micro-batches"),
    (["--nproc", "64"], "--nproc 64 is more ranks than train.batch_size=32 has examples"),
    (["--nproc", "2", "--jobs", "2"], "--nproc 2 runs one cell at a time on 2 processes; it does not combine with "
                                      "--jobs 2"),
])
def test_bad_nproc_settings_are_refused_before_anything_runs(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*GRID, *args, "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not any(tmp_path.rglob(RESULT_FILE))


def test_plugins_of_this_process_only_are_refused_for_the_ranks(tmp_path):
    regs = testing.registry()
    plan = make_plan(regs, _request(tmp_path, "seqft", "tiny-vector"))
    with pytest.raises(ClbenchError, match="stream 'tiny-vector' comes from plugin 'clbench.testing.tiny.TinyPlugin', "
                                           "registered in this process only"):
        execute(plan, regs, progress=False, options={"nproc": 2})


@pytest.mark.slow
def test_torchrun_processes_are_the_ranks(tmp_path, grids):
    """`torchrun --nproc-per-node 2 -m clbench run ...`: the same group code, joined through env://; the cell
    equals the one `--nproc 2` ran (and the other rank writes nothing, prints nothing)."""
    out = tmp_path / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "clbench", "run", "--profile", "quick", "--methods", "ewc", "--stream", "split-digits",
           "--orders", "1", "--seeds", "0", "--set", "train.epochs=1", "--set", "train.lr=0.0125", "--out", str(out),
           "--no-progress"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("clbench: 1 cell:") == 1  # the summary, from rank 0 only
    [path] = out.rglob(RESULT_FILE)
    from clbench._core.results import read_result

    result = read_result(path)
    reference = grids["two ranks"]["ewc"]
    assert result.env["world_size"] == 2
    assert result.accuracy_matrix == reference.accuracy_matrix
    assert result.footprints["sha256"] == reference.footprints["sha256"]
    assert all(math.isfinite(v) for v in result.metrics.values() if v is not None)


@pytest.mark.slow
def test_a_ray_task_runs_its_cell_on_nproc_ranks(tmp_path, grids, local_ray):
    """`--executor ray --nproc 2` (on GPUs: `--cell-gpus 2`): the ranks are processes of the cell's Ray task."""
    regs = testing.registry()
    req = _request(tmp_path, "ewc", "split-digits", "quick", sets={"train.epochs": [1], "train.lr": [0.0125]},
                   orders=["1"])
    [result] = execute(make_plan(regs, req), regs, executor="ray", progress=False,
                       options={"nproc": 2, "cell_cpus": 2})
    assert result.status == "complete", result.error
    assert result.env["world_size"] == 2
    assert result.footprints["sha256"] == grids["two ranks"]["ewc"].footprints["sha256"]


def test_the_collective_timeout_comes_from_the_environment_and_reaches_the_group(monkeypatch):
    """Rank 0 alone evaluates what cannot be split while the others wait in a collective: the group's timeout is
    $CLBENCH_COLLECTIVE_TIMEOUT_S (default two hours, not NCCL's 10 minutes), handed to init_process_group."""
    import datetime

    from clbench._exec import ranks

    seen = {}
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *a, **kw: seen.update(kw))
    monkeypatch.delenv(ranks.TIMEOUT_ENV, raising=False)
    ranks.join(0, 2, 0, "gloo", "file:///nonexistent")
    assert seen["timeout"] == datetime.timedelta(hours=2)
    monkeypatch.setenv(ranks.TIMEOUT_ENV, "90.5")
    ranks.join(0, 2, 0, "gloo", "file:///nonexistent")
    assert seen["timeout"] == datetime.timedelta(seconds=90.5)
    for bad in ("soon", "0", "-3"):
        monkeypatch.setenv(ranks.TIMEOUT_ENV, bad)
        with pytest.raises(ClbenchError, match="CLBENCH_COLLECTIVE_TIMEOUT_S"):
            ranks.join(0, 2, 0, "gloo", "file:///nonexistent")


def test_a_pool_whose_start_failed_part_way_stops_the_ranks_it_started_alone(monkeypatch):
    """The second rank's start raises: stopping the pool ends the first and leaves the other alone (joining a
    process never started raised "can only join a started process" over the real error)."""
    import multiprocessing

    from clbench._exec import ranks
    from clbench._exec.runner import Runner

    calls = []
    real = multiprocessing.get_context("spawn").Process.start

    def start(self):
        calls.append(self.name)
        if len(calls) == 2:
            raise OSError("no more processes")
        real(self)

    monkeypatch.setattr(multiprocessing.get_context("spawn").Process, "start", start)
    monkeypatch.setattr(ranks, "_rank_main", _idle_rank)
    pool = ranks.RankPool(Runner(testing.registry(), progress=False), 2, ())
    pool.backend = "gloo"
    with pytest.raises(OSError, match="no more processes"):
        with pool:
            pool._start()
    assert calls == ["clbench-rank-0", "clbench-rank-1"] and pool.procs == []


def _idle_rank(*args):
    """A rank that waits for its stop message (its inbox is the 8th argument)."""
    args[7].get()
