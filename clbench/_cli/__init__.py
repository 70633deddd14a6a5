"""The command line (``clbench``), its commands, and the testing kit for plugin authors (public as
``clbench.testing``)."""
