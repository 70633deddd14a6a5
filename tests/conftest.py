pytest_plugins = ["clbench.testing"]
