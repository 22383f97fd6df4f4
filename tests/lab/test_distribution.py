"""The lab's own distribution, litegate-lab: its wheel holds the lab with the
web apps' templates, registers the litegate command's bench and web, and
depends on litegate."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.litegate.test_distribution import _clean_env

LAB = Path(__file__).resolve().parents[2] / "lab"


def test_the_lab_wheel(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(LAB)],
        capture_output=True, text=True, timeout=300, check=False, env=_clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = tmp_path.glob("litegate_lab-*.whl")  # built from the sdist, as a release is
    (sdist,) = tmp_path.glob("litegate_lab-*.tar.gz")
    twine = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert twine.returncode == 0, twine.stdout + twine.stderr
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
        metadata = whl.read(f"{info}/METADATA").decode()
    assert {n.split("/")[0] for n in names} == {"litegate_lab", info}
    source = LAB / "src"
    shipped = {
        str(p.relative_to(source))
        for p in (source / "litegate_lab").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert shipped - names == set()  # every file of the package: code, templates, py.typed
    assert "litegate_lab/web/app/templates/hn/posts.html" in names
    assert "litegate_lab/web/fastapi_app/templates/posts.html" in names
    assert "litegate_lab/py.typed" in names
    assert "[litegate.commands]" in entry_points
    assert "bench = litegate_lab:bench_main" in entry_points
    assert "web = litegate_lab:web_main" in entry_points
    assert "Requires-Dist: litegate[" in metadata
