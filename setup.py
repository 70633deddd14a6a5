"""Package discovery that pyproject.toml cannot express: `plugins/` is installed as `clbench_plugins`.

A generic top-level module named `plugins` would collide with other projects in site-packages, so the
folder is mapped to a distinct import name; every sub-folder of `plugins/` becomes `clbench_plugins.<name>`.
"""

from setuptools import find_packages, setup

plugin_packages = ["clbench_plugins"] + [f"clbench_plugins.{p}" for p in find_packages("plugins")]
setup(
    packages=find_packages(include=["clbench", "clbench.*"]) + plugin_packages,
    package_dir={"clbench_plugins": "plugins"},
)
