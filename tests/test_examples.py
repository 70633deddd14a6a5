"""Per-example scores: stored compactly in every result, equal to the matrix they average to, kept through a resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from clbench import testing
from clbench._core.examples import decode, encode, final_row
from clbench._core.results import read_result


@pytest.mark.parametrize("scores", [torch.tensor([1, 0, 1, 1, 0, 1, 1, 1, 1]), torch.rand(37)])
def test_encode_decode_round_trip(scores):
    entry = encode(scores)
    back = decode(entry)
    assert entry["n"] == len(scores) and ("bits" in entry) == bool(((scores == 0) | (scores == 1)).all())
    np.testing.assert_allclose(back, scores.float().numpy(), atol=1e-3)  # float16 otherwise
    assert encode(None) is None and decode(None) is None


def test_ten_thousand_correct_examples_take_few_bytes():
    scores = (torch.rand(10_000, generator=torch.Generator().manual_seed(0)) < 0.97).float()
    assert len(encode(scores)["bits"]) < 1400  # 10,000 bits = 1,250 bytes before zlib and base64


def test_a_result_stores_each_evaluation_and_the_untrained_row(tmp_path):
    [r] = testing.run(testing.registry(), tmp_path, "seqft")
    stored = read_result(r.path)
    T = len(stored.tasks)
    assert len(stored.examples) == T and all(len(row) == T for row in stored.examples)
    for i in range(T):
        for j in range(T):
            assert 100 * decode(stored.examples[i][j]).mean() == pytest.approx(stored.accuracy_matrix[i][j], abs=1e-4)
    assert len(stored.initial_row) == T
    expected = (sum(stored.accuracy_matrix[j - 1][j] - stored.initial_row[j] for j in range(1, T)) / (T - 1))
    assert stored.metrics["FWT"] == pytest.approx(expected)
    assert set(final_row(stored.examples, stored.tasks)) == set(stored.tasks)
    assert stored.compute["trainable_parameters"] > 0 and stored.compute["method_state_bytes"] is not None


def test_a_stream_whose_score_is_no_mean_stores_none():
    from clbench.data import Stream, TaskInfo

    class F1(Stream):
        def score(self, task, pred, gold):
            return 42.0

    tasks, orders = [TaskInfo("t", ("a", "b"))], {"1": ["t"]}
    pred, gold = torch.tensor([1, 0]), torch.tensor([1, 1])
    assert F1("x", tasks, orders).example_scores("t", pred, gold) is None
    assert Stream("x", tasks, orders).example_scores("t", pred, gold).tolist() == [1.0, 0.0]
