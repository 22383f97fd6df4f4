"""The packages' shape: no two of litegate's modules (or the lab's) import
each other, and the product never imports the lab (its own distribution)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"litegate": ROOT / "src", "litegate_lab": ROOT / "lab" / "src"}


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
    # the two pairs issue 19 named are among those checked
    assert "litegate._maintenance" in modules
    assert "litegate_lab.queue._pgsides" in modules


def test_the_product_never_imports_the_lab() -> None:
    """Not by an import, nor by a name in a string (import_module, -m): the
    lab's commands reach the product's CLI through entry points only."""
    product = _modules_of("litegate", SOURCES["litegate"])
    assert "litegate.__main__" in product
    naming = sorted(name for name, path in product.items() if "litegate_lab" in path.read_text())
    assert naming == []
    assert not (SOURCES["litegate"] / "litegate" / "lab").exists()
