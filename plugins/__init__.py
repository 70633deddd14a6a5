"""clbench's built-in plugins, installed as ``clbench_plugins`` and loaded through the ``clbench``
entry-point group like any third-party plugin. One folder per plugin."""
