"""Tools over result files: the leaderboard, plots, verify, doctor. Import everything below them."""
