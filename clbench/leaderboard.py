"""Results in Python: ``load(DIR)`` is a run's cells as a pandas DataFrame, ``summary_frame`` its summary table
(the numbers ``clbench leaderboard --format csv`` writes). The leaderboard's code lives in
:mod:`clbench._tools.leaderboard`."""

from clbench._tools.leaderboard import load, summary_frame

__all__ = ["load", "summary_frame"]
