"""The packages' shape: no two of litegate's modules (or the lab's) import
each other, no package of the product reaches past another's seams to its
private names, and the product never imports the lab (its own distribution)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"litegate": ROOT / "src", "litegate_lab": ROOT / "lab" / "src"}
SRC = SOURCES["litegate"]


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package, src in SOURCES.items():
        out.update(_modules_of(package, src))
    return out


def _modules_of(package: str, src: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in (src / package).rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            continue  # a package's own face: its submodules may import it
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every litegate module ``name`` imports, at the top or inside a function."""
    package = name.rsplit(".", 1)[0].split(".")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            targets = [module] + [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        found.update(t for t in targets if t in modules and t != name)
    return found


def test_no_two_modules_import_each_other() -> None:
    modules = _modules()
    edges = {name: _imports(name, path, modules) for name, path in modules.items()}
    both = sorted(
        (a, b) for a, targets in edges.items() for b in targets if a < b and a in edges[b]
    )
    assert both == [], f"modules that import each other (give each pair one direction): {both}"
    # the two pairs once found importing each other are among those checked
    assert "litegate._maintenance" in modules
    assert "litegate_lab.queue._pgsides" in modules


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _cross_package_private_uses() -> list[str]:
    """Every use, in one package, of a private (``_name``) module-level name
    of a module in another package (a subpackage counts as another): ``from
    m import _name`` and ``m._name`` on an imported module ``m``."""
    modules: dict[str, Path] = {}
    for path in (SRC / "litegate").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    packages = {name: _package_of(name, path) for name, path in modules.items()}
    found: list[str] = []
    for name, path in sorted(modules.items()):
        here = packages[name].split(".")
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}  # local name -> litegate module it names
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:  # a module, not a name
                        aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
                    elif (
                        source in modules
                        and alias.name.startswith("_")
                        and not alias.name.startswith("__")
                        and packages[source] != packages[name]
                    ):
                        found.append(f"{name}: from {source} import {alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and packages[aliases[node.value.id]] != packages[name]
            ):
                found.append(f"{name}: {aliases[node.value.id]}.{node.attr}")
    return found


def test_no_package_uses_a_private_name_of_another_packages_module() -> None:
    """A capability that needs another package's internals gets a named seam
    there (a public name of its private module), not a reach past it."""
    assert _cross_package_private_uses() == []


def test_the_private_name_check_sees_a_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: a module of a subpackage that imports a
    private name of the core, or reads one off a core module, is reported."""
    fake = tmp_path / "src"
    (fake / "litegate" / "sub").mkdir(parents=True)
    (fake / "litegate" / "__init__.py").write_text("")
    (fake / "litegate" / "_core.py").write_text("_SECRET = 1\nPUBLIC = 2\n")
    (fake / "litegate" / "_peer.py").write_text("from ._core import _SECRET\n")  # same package
    (fake / "litegate" / "sub" / "__init__.py").write_text("")
    (fake / "litegate" / "sub" / "m.py").write_text(
        "from .. import _core\nfrom .._core import _SECRET, PUBLIC\nx = _core._SECRET\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "SRC", fake)
    assert _cross_package_private_uses() == [
        "litegate.sub.m: from litegate._core import _SECRET",
        "litegate.sub.m: litegate._core._SECRET",
    ]


def _foreign_private_attributes(path: Path) -> list[str]:
    """``x._name`` in ``path`` where ``_name`` is not one of the module's own
    (a function, method or attribute it defines): a reach into another
    module's object."""
    tree = ast.parse(path.read_text())
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.ImportFrom):
            own.update(a.asname or a.name for a in node.names)
    return sorted(
        {
            f"{path.name}:{node.lineno}: .{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and node.attr not in own
        }
    )


def test_the_asyncio_face_reaches_the_core_only_through_the_engine() -> None:
    """litegate.aio drives the engine (``engine_of(db)``) as queue/aio.py
    drives queue/_core.py: no private method or attribute of a Database, its
    process state or its engine is touched from the face."""
    assert _foreign_private_attributes(SRC / "litegate" / "aio.py") == []


def test_the_product_never_imports_the_lab() -> None:
    """Not by an import, nor by a name in a string (import_module, -m): the
    lab's commands reach the product's CLI through entry points only."""
    product = _modules_of("litegate", SOURCES["litegate"])
    assert "litegate.__main__" in product
    naming = sorted(name for name, path in product.items() if "litegate_lab" in path.read_text())
    assert naming == []
    assert not (SOURCES["litegate"] / "litegate" / "lab").exists()


def _private_litegate_imports(src: Path, package: str) -> list[str]:
    """Every import, in ``package`` under ``src``, of a private litegate
    module (a ``_name`` anywhere in its dotted path) or of a private name
    from a public one: what a distribution of its own may not rely on."""
    found: list[str] = []
    for path in sorted((src / package).rglob("*.py")):
        where = path.relative_to(src).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "litegate" and any(
                    p.startswith("_") and not p.startswith("__") for p in parts
                ):
                    found.append(f"{where}:{node.lineno}: {name}")
    return found


def test_the_lab_uses_only_the_products_public_names() -> None:
    """The lab is a distribution of its own: it measures litegate through
    public modules (``litegate.diagnostics`` for the grant log and the lock
    file's counters, ``litegate.ops.read_here``, the tasks backend's
    ``counts()``, the cache's ``shutdown()``), so a change inside the core
    that keeps those names cannot break it. (``litegate.__main__`` is the
    CLI the lab's commands plug into.)"""
    found = [
        f
        for f in _private_litegate_imports(SOURCES["litegate_lab"], "litegate_lab")
        if not f.endswith((": litegate.__main__", ": litegate.__main__.main"))
    ]
    assert found == []


def test_the_lab_check_sees_a_private_import(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        "import litegate\nfrom litegate import _grantlog, connect\n"
        "from litegate.queue._sqlite import JOBS\nimport litegate._busy\n"
        "from litegate.diagnostics import Grant\n"
    )
    assert _private_litegate_imports(tmp_path, "pkg") == [
        "pkg/m.py:2: litegate._grantlog",
        "pkg/m.py:3: litegate.queue._sqlite",
        "pkg/m.py:3: litegate.queue._sqlite.JOBS",
        "pkg/m.py:4: litegate._busy",
    ]
