"""`clbench leaderboard` ranks by the matrix metrics each result's accuracy matrix gives, not by the numbers its file
stores: a hand-edited AA is named in a warning and does not move a row."""

from __future__ import annotations

import json
import statistics

from click.testing import CliRunner

from clbench import testing
from clbench._cli.main import build_cli


def test_a_stored_aa_that_its_matrix_does_not_give_is_named_and_not_ranked(tmp_path):
    regs = testing.registry()
    results = testing.run(regs, tmp_path / "runs", "seqft,ewc")
    edited = next(r for r in results if r.method == "ewc")
    data = json.loads(edited.path.read_text())
    final = data["accuracy_matrix"][-1]
    aa = statistics.fmean(final)  # AA: the mean of the last row, computed here
    assert abs(data["metrics"]["AA"] - aa) < 1e-9
    data["metrics"]["AA"] = 99.9
    edited.path.write_text(json.dumps(data))

    def board(out):
        done = CliRunner().invoke(build_cli(regs), ["leaderboard", str(tmp_path / "runs"), "--out", str(out),
                                                    "--no-plots", "--format", "csv"], obj=regs)
        assert done.exit_code == 0, done.output
        return done.output

    output = board(tmp_path / "boards")
    assert "1 result store matrix metrics that their accuracy matrices do not give" in output
    assert "AA stored 99.9 but its matrix gives" in output
    import pandas as pd

    [table] = list((tmp_path / "boards").glob("*.csv"))
    rows = pd.read_csv(table)
    row = rows[rows["method"] == "ewc"].iloc[0]
    assert abs(row["AA mean"] - aa) < 1e-6  # the recomputed value (one cell a row)
