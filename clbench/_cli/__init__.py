"""The command line (``clbench``) and its commands; the testing kit that drives it is :mod:`clbench.testing`."""
