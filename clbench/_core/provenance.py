"""What made a result beyond its settings: the code and the data (``result.json``'s ``provenance``).

``config_hash`` names the settings. Two runs with the same settings can still compute different numbers: a
plugin edited between them, or a data file replaced. So every result also records

- ``versions``: clbench's version and the version of each distribution whose plugin built the cell;
- ``code``: per component (``method:ewc``, ``model:mlp``, ``stream:split-digits``, ``metric:AA``), the sha256 of
  the sources of the plugin that registered it: its package's ``*.py`` files (or its one module), and the files of
  the modules of its top-level package outside that folder that they import, found in their ``import`` statements
  and followed transitively (``clbench_plugins._shared``, code several built-in plugins run): a change to shared
  code changes the digest of every plugin that imports it, and of no other (:func:`source_digest`). Settings are
  not code: a module named ``presets.py`` (or ``*_presets.py``) that only assigns values (:func:`settings_only`)
  is left out, since every value it gives a cell is in the cell's resolved configuration, which ``config_hash``
  names: editing a preset makes other cells, it does not make the old ones stale;
- ``data``: per file a stream read while loading its tasks, the file's sha256. A file is named relative to the
  stream's ``data_dir`` (``data_dir:sst2/train.json``) or to the Python package it ships in
  (``pkg:clbench_plugins/digits/data/digits.npz``), so a committed result checks on another machine.

Files are seen through Python's ``open`` audit event (PEP 578) while a stream's factory builds it and while
:meth:`clbench.data.Stream.data` loads a task: numpy, json, pandas and PIL readers, whatever the plugin calls. A
stream that opens no file because its plugin cached the data in this process gets the files that plugin's earlier
loads opened (:func:`stream_files`). Readers that open files in C++ (a Hugging Face ``datasets`` Arrow cache) are
not seen; such streams are identified by their settings (hub name, revision).
Model weights are identified by their name or path, not digested (gigabytes).

A rerun compares a finished result's provenance with the code and data present now (:func:`changes`) before it
reuses the result; see ``clbench run --on-change``.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from clbench.data import reading, remember, seen_by_package

if TYPE_CHECKING:
    from clbench._core.registry import Registries
    from clbench.cell import Cell

T = TypeVar("T")

# what a stream's loader opens that is not data: its own code and compiled extensions, and the kernel's pseudo-files
# (/proc/stat and the like: read by libraries, and never the same twice)
_NOT_DATA = frozenset({".py", ".pyc", ".pyi", ".so", ".pyd", ".dylib", ".dll", ".pth"})
_PSEUDO = (Path("/proc"), Path("/sys"), Path("/dev"))
_CHUNK = 1 << 20


def data_files(opened: set[str]) -> list[Path]:
    """The data files among ``opened`` paths: existing regular files that are not code."""
    out = []
    for p in sorted(opened):
        path = Path(p)
        if path.suffix not in _NOT_DATA and not any(path.is_relative_to(root) for root in _PSEUDO) and path.is_file():
            out.append(path.resolve())
    return sorted(set(out))


def observed(build: Callable[[], T]) -> T:
    """``build()`` (a stream's factory), the files it opens remembered for its package (:func:`clbench.data.remember`) and added
    to what it returns (``Stream.opened``, when it is a stream): a file a factory reads is the cell's data as
    much as a task's."""
    with reading() as opened:
        built = build()
    remember(built, opened)
    seen = getattr(built, "opened", None)
    if isinstance(seen, set):
        seen.update(opened)
    return built


def stream_files(stream: object, opened: set[str]) -> list[Path]:
    """The data files of a cell whose stream opened ``opened``. A stream that opened none may have loaded from a
    cache its plugin keeps in this process (the digits streams share one copy of scikit-learn's digits): it gets
    the files every load by its package's streams opened in this process (:func:`clbench.data.remember`)."""
    return data_files(opened) or data_files(seen_by_package(stream))


_digests: dict[tuple[str, int, int], str] = {}


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes; cached per (path, size, mtime) for the life of the process, so a run hashes each
    data file once however many cells read it."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _digests:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            while block := fh.read(_CHUNK):
                h.update(block)
        _digests[key] = h.hexdigest()
    return _digests[key]


def _package_root(top: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _data_dir(cell: Cell, field: str | None) -> Path | None:
    """The folder the stream's config names in ``field`` (its spec's ``data_dir_field``), when it has one: where
    its data files are named from."""
    data_dir = cell.stream_config.get(field) if field else None
    return Path(str(data_dir)).expanduser().resolve() if data_dir else None


def _top_level_packages() -> dict[Path, str]:
    """Folder → import name of every top-level package imported (a folder may be named otherwise than its
    package: ``plugins/`` is ``clbench_plugins``)."""
    out = {}
    for name, module in list(sys.modules.items()):
        paths = getattr(module, "__path__", None)
        if "." not in name and paths:
            with contextlib.suppress(TypeError, OSError):
                out[Path(next(iter(paths))).resolve()] = name
    return out


def data_key(path: Path, cell: Cell, field: str | None) -> str:
    """How ``path`` is named in a result: under the stream's data folder (``field``: its spec's
    ``data_dir_field``), in a Python package, or by its absolute path."""
    root = _data_dir(cell, field)
    if root is not None and root in path.parents:
        return "data_dir:" + path.relative_to(root).as_posix()
    packages = _top_level_packages()
    for parent in reversed(path.parents):  # the outermost package holding it
        if parent in packages:
            return f"pkg:{packages[parent]}/{path.relative_to(parent).as_posix()}"
    return f"file:{path}"


def locate(key: str, cell: Cell, field: str | None) -> Path | None:
    """The file a :func:`data_key` names on this machine, or None when it cannot be found."""
    prefix, _, rest = key.partition(":")
    if prefix == "data_dir":
        root = _data_dir(cell, field)
        path = root / rest if root else None
    elif prefix == "pkg":
        top, _, rel = rest.partition("/")
        root = _package_root(top)
        path = root / rel if root else None
    else:
        path = Path(rest)
    return path if path is not None and path.is_file() else None


def data_digests(paths: list[Path], cell: Cell, field: str | None) -> dict[str, str]:
    return {data_key(p, cell, field): file_digest(p) for p in paths}


# --------------------------------------------------------------------------- code
def _module_of(plugin: object) -> types.ModuleType | None:
    if isinstance(plugin, types.ModuleType):
        return plugin
    return sys.modules.get(type(plugin).__module__)


def imports_of(source: bytes, package: str) -> list[tuple[str, tuple[str, ...]]]:
    """The import statements of a module's source, anywhere in it (a function's too), as ``(module, names)`` with
    the module absolute (``package``, the module's package, resolves a relative one): ``import a.b`` is
    ``("a.b", ())``, ``from a import b, c`` is ``("a", ("b", "c"))``; ``[]`` for source this Python cannot parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            keep = len(package.split(".")) + 1 - node.level if package else 0  # level 1: the package itself
            if node.level and keep < 1:  # a relative import above the top-level package: it fails anyway
                continue
            up = package.split(".")[:keep] if node.level else []
            found.append(
                (
                    ".".join([*up, *([node.module] if node.module else [])]),
                    tuple(a.name for a in node.names if a.name != "*"),
                )
            )
    return found


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of ``body`` and of the blocks nested in it (functions, classes, if/try/with/loops, match
    cases): where an import can be, without walking the expressions (most of a module's nodes)."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, field, None) or ():
                if isinstance(child, ast.stmt):
                    yield from _statements([child])
                else:  # an except handler or a match case: a block of statements
                    yield from _statements(getattr(child, "body", []))


_settings_only: dict[tuple[str, int, int], bool] = {}


def settings_only(path: Path) -> bool:
    """Whether ``path`` is a presets module: named ``presets.py`` or ``*_presets.py``, and nothing at its top level
    but a docstring, imports and assignments (no function, class or statement that branches or loops). The values
    such a module builds reach a cell only as its settings, which the cell's configuration records; a presets
    module that defines code is hashed as code."""
    if not (path.stem == "presets" or path.stem.endswith("_presets")):
        return False
    try:
        st = path.stat()
    except OSError:
        return False
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _settings_only:
        try:
            body = ast.parse(path.read_bytes()).body
        except (SyntaxError, ValueError):
            body = [ast.Pass()]
        allowed = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign)
        _settings_only[key] = all(
            isinstance(node, allowed)
            or (
                isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            )
            for node in body
        )
    return _settings_only[key]


# per version of a source file (path, size, mtime) and the folder of its top-level package: the files of that
# package it imports, each with whether it is a package's __init__ standing for the package's every *.py
_links: dict[tuple[str, int, int, str], tuple[tuple[Path, bool], ...]] = {}


class _Sources:
    """The files outside a plugin's folder that its files import from their own top-level package (``root`` is that
    package's folder, named ``top``), transitively: an imported module's file, an imported package's every ``*.py``
    (``from pkg import sub`` imports the submodule, not all of ``pkg``), and the ``__init__.py`` of each package
    between the top level and an imported module, which runs on the way. The top-level package's own
    ``__init__.py`` is every plugin's and is not counted. A file's imports are read once per version of it."""

    def __init__(self, root: Path, top: str, inside: Path) -> None:
        self.root, self.top, self.inside = root, top, inside

    def module_file(self, module: str) -> Path | None:
        parts = module.split(".")
        if parts[0] != self.top or len(parts) < 2:
            return None
        base = self.root.joinpath(*parts[1:])
        for path in (base / "__init__.py", base.with_name(base.name + ".py")):
            if path.is_file():
                return path
        return None

    def pulled(self, module: str, whole: bool) -> list[tuple[Path, bool]]:
        """The files importing ``module`` runs: its packages' ``__init__.py`` and its own file (``whole``: a
        package as such, every file of it)."""
        parts = module.split(".")
        inits = [self.module_file(".".join(parts[:i])) for i in range(2, len(parts))]
        own = self.module_file(module)
        return [(p, False) for p in inits if p is not None] + (
            [(own, whole and own.name == "__init__.py")] if own else []
        )

    def links(self, path: Path) -> tuple[tuple[Path, bool], ...] | None:
        """What ``path`` imports from the top-level package (None: the file is gone)."""
        try:
            st = path.stat()
        except OSError:
            return None
        key = (str(path), st.st_size, st.st_mtime_ns, str(self.root))
        if key not in _links:
            data = path.read_bytes()
            # only a file that names the package, or imports relatively out of its own folder, can import from it
            outside = self.inside not in path.parents
            found = []
            if self.top.encode() in data or (b"from ." if outside else b"from ..") in data:
                parts = path.relative_to(self.root).with_suffix("").parts
                for module, names in imports_of(data, ".".join([self.top, *parts[:-1]])):
                    if module.split(".")[0] != self.top:
                        continue
                    subs = [f"{module}.{n}" for n in names if self.module_file(f"{module}.{n}") is not None]
                    found += [link for sub in subs for link in self.pulled(sub, True)]
                    found += self.pulled(module, len(subs) < len(names) or not names)
            _links[key] = tuple(dict.fromkeys(found))
        return _links[key]

    def closure(self, own: list[Path]) -> list[Path]:
        files: set[Path] = set()
        seen, todo = set(own), list(own)
        while todo:
            path = todo.pop()
            for target, whole in self.links(path) or ():
                for f in sorted(target.parent.rglob("*.py")) if whole else [target]:
                    if f in seen or "__pycache__" in f.parts or self.inside in f.parents or settings_only(f):
                        continue
                    seen.add(f)
                    files.add(f)
                    todo.append(f)
        return sorted(f for f in files if f.is_file())


def source_digest(plugin: object) -> str:
    """sha256 of a plugin's sources: every ``*.py`` of its package folder but its presets modules
    (:func:`settings_only`; a plugin in a package), or its one module; ``unknown`` when it has no source file
    (defined in an interactive session). A plugin in a package also
    runs what its files import from their top-level package outside that folder (``clbench_plugins._shared``, code
    several built-in plugins run): those files (:class:`_Sources`) are hashed after its own, named from the
    top-level package, so a change to shared code changes the digest of every plugin that imports it, and only
    theirs."""
    module = _module_of(plugin)
    file = getattr(module, "__file__", None)
    if not file:
        return "unknown"
    path = Path(file).resolve()
    package = getattr(module, "__package__", "") or ""
    files = (
        sorted(p for p in path.parent.rglob("*.py") if "__pycache__" not in p.parts and not settings_only(p))
        if package
        else [path]
    )
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(path.parent).as_posix().encode() + b"\0")
        h.update(file_digest(f).encode() + b"\n")
    if package:
        parts = package.split(".")
        root = path.parents[len(parts) - 1]
        for f in _Sources(root, parts[0], path.parent).closure(files):
            h.update(f"{parts[0]}/{f.relative_to(root).as_posix()}".encode() + b"\0")
            h.update(file_digest(f).encode() + b"\n")
    return h.hexdigest()


def components(cell: Cell) -> list[tuple[str, str]]:
    """The (kind, name) of every plugin component that computes a cell's numbers, metrics aside."""
    return [*(("methods", p) for p in cell.parts), ("models", cell.model), ("streams", cell.stream)]


_KIND = {"methods": "method", "models": "model", "streams": "stream", "metrics": "metric"}


def _clbench_version() -> str:
    try:
        return importlib.metadata.version("clbench")
    except importlib.metadata.PackageNotFoundError:
        return "dev"


def _code_of(regs: Registries, entries: list[tuple[str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    by_plugin: dict[str, str] = {}
    code: dict[str, str] = {}
    versions = {"clbench": _clbench_version()}
    for kind, name in entries:
        origin = regs.kind(kind).origins.get(name)
        if kind == "streams" and name in regs.stream_forms:  # a form of another stream: its code makes the data
            origin = regs.streams.origins.get(regs.stream_forms.get(name).base)
        if origin is None:
            continue
        if origin.plugin not in by_plugin:
            plugin = regs.plugin(origin.plugin)
            by_plugin[origin.plugin] = source_digest(plugin) if plugin is not None else "unknown"
        code[f"{_KIND[kind]}:{name}"] = by_plugin[origin.plugin]
        if origin.version != "-":
            versions[origin.dist] = origin.version
    return dict(sorted(code.items())), dict(sorted(versions.items()))


def code_record(regs: Registries, cell: Cell) -> tuple[dict[str, str], dict[str, str]]:
    """``(code, versions)`` of the plugins that build ``cell`` and compute its metrics, as loaded now."""
    return _code_of(regs, [*components(cell), *(("metrics", m) for m in regs.metrics)])


def metric_code(regs: Registries) -> dict[str, str]:
    """The ``code`` entries of the metric plugins loaded now (``clbench metrics`` records them when it writes)."""
    return _code_of(regs, [("metrics", m) for m in regs.metrics])[0]


def changes(
    recorded: Mapping[str, Any] | None,
    metrics: Mapping[str, Any] | None,
    regs: Registries,
    cell: Cell,
    now: tuple[dict[str, str], dict[str, str]] | None = None,
    tasks: Sequence[str] | None = None,
) -> list[str] | None:
    """What differs between the code and data that made a result (its ``provenance`` and the metrics it holds)
    and the code and data here now: ``[]`` when nothing, ``None`` when the result records no provenance (written
    before clbench recorded it: the code cannot be checked; only missing metrics are). ``metrics`` is None for a
    result that computes none (diverged). ``now`` is :func:`code_record` when the caller has it; ``tasks``, the
    result's task list, is checked against the tasks the stream has now (``cell.tasks``)."""
    code, versions = now or code_record(regs, cell)
    missing = [m for m in regs.metrics if metrics is not None and m not in metrics]
    out = (
        [
            f"metric{'s' if len(missing) > 1 else ''} {', '.join(missing)} {'were' if len(missing) > 1 else 'was'} "
            "not computed (no plugin computed them when the cell ran)"
        ]
        if missing
        else []
    )
    if recorded is None:
        return out or None
    if tasks is not None and cell.tasks and list(cell.tasks) != list(tasks):
        out.append(f"the stream's tasks changed: {', '.join(tasks)} → {', '.join(cell.tasks)}")
    old_versions = recorded.get("versions", {})
    for dist in sorted(set(old_versions) & set(versions)):
        if old_versions[dist] != versions[dist]:
            out.append(f"{dist} {old_versions[dist]} → {versions[dist]}")
    old_code = recorded.get("code", {})
    for name in sorted(set(old_code) & set(code)):
        if old_code[name] != code[name]:
            out.append(f"{name.replace(':', ' ', 1)}: its plugin's code changed")
    for name in sorted(set(code) - set(old_code)):
        if not name.startswith("metric:"):  # a missing metric is named above
            out.append(f"{name.replace(':', ' ', 1)}: made by another plugin")
    for key, digest in sorted(recorded.get("data", {}).items()):
        path = locate(key, cell, regs.streams.get(cell.stream).data_dir_field)
        if path is None:
            out.append(f"data file {key} is missing here")
        elif file_digest(path) != digest:
            out.append(f"data file {key} changed")
    return out


def differences(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """What differs between two results' provenance records (``[]`` when either records none): the components
    whose code changed, the versions, the data files."""
    if old is None or new is None:
        return []
    out = []
    for block, what in (("versions", "version of {}"), ("code", "code of {}"), ("data", "data file {}")):
        a, b = old.get(block, {}), new.get(block, {})
        out += [
            what.format(k.replace(":", " ", 1) if block == "code" else k)
            for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)
        ]
    return out
