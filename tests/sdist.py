"""A package's source distribution from PyPI, unpacked once into a cache:
the test suites of Django and SQLAlchemy ship only there."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path


def unpacked(name: str, version: str, cache: Path, marker: str) -> Path:
    """``cache/<name>-<version>``, downloaded and unpacked unless ``marker``
    (a path inside it) is there already."""
    target = cache / f"{name}-{version}"
    if (target / marker).exists():
        return target
    cache.mkdir(exist_ok=True)
    print(f"downloading {name} {version}'s source distribution (its tests)...", flush=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
         ":all:", f"{name}=={version}", "-d", str(cache)],
        check=True,
    )  # fmt: skip
    pattern = "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in name)
    archive = next(cache.glob(f"{pattern}-{version}.tar.gz"))
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12
            tar.extractall(cache, filter="data")
        else:  # pragma: no cover - older Pythons: the project's own archive from PyPI
            tar.extractall(cache)
    return target
