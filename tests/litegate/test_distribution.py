"""What `pip install litegate` gives a user: the product's wheel and sdist,
built from this checkout, hold the product only (no lab, no web app, no FUSE
filesystem), pass `twine check`, and the wheel alone, in a fresh virtual
environment with no other package, runs the README's first example and
answers `litegate bench` / `litegate web` with how to install the lab."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import litegate

ROOT = Path(__file__).resolve().parents[2]

# Path parts that belong to the lab (litegate-lab), never to the product.
LAB_PARTS = {"lab", "litegate_lab", "web", "app", "fastapi_app", "durability", "templates"}
# What the lab imports and the product must not: the charts, the web apps'
# frameworks, the FUSE binding.
LAB_IMPORTS = re.compile(
    r"^\s*(?:import|from)\s+(matplotlib|fastapi|uvicorn|mfusepy|jinja2)\b", re.M
)


def _clean_env() -> dict[str, str]:
    """This environment without what points Python at other code."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


def first_python_block(text: str) -> str:
    """The first ```python fenced block of a Markdown text."""
    found = re.search(r"^```python\n(.*?)^```\s*$", text, re.S | re.M)
    assert found, "README.md has no ```python block"
    return found.group(1)


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel and the sdist, built as a release would be (the sdist first,
    the wheel from it)."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False, env=_clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheels = sorted(out.glob("*.whl"))
    sdists = sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1, wheels
    assert len(sdists) == 1, sdists
    return {"wheel": wheels[0], "sdist": sdists[0]}


def test_twine_check_passes(dists: dict[str, Path]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dists["wheel"]),
         str(dists["sdist"])],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def _lab_members(names: list[str], read: dict[str, str]) -> list[str]:
    bad = [n for n in names if LAB_PARTS & set(Path(n).parts)]
    bad += [n for n in names if n.endswith((".html", ".css", ".js"))]
    bad += [n for n, text in read.items() if LAB_IMPORTS.search(text)]
    return sorted(set(bad))


def test_the_wheel_holds_the_product_only(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as whl:
        names = whl.namelist()
        sources = {n: whl.read(n).decode() for n in names if n.endswith(".py")}
        metadata = next(whl.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = next(
            whl.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")
        )
    version = litegate.__version__
    assert f"litegate-{version}-py3-none-any.whl" == dists["wheel"].name
    tops = {n.split("/")[0] for n in names}
    assert tops == {"litegate", f"litegate-{version}.dist-info"}
    assert _lab_members(names, sources) == []
    # the product's faces are all there, typed
    for module in ("__init__", "__main__", "aio", "queue/__init__", "django/base",
                   "sqlalchemy/__init__", "ops/_cli"):  # fmt: skip
        assert f"litegate/{module}.py" in names
    assert "litegate/py.typed" in names
    # its metadata: one version, the Pythons it is tested on, where it lives
    assert f"\nVersion: {version}\n" in metadata
    assert "Requires-Python: >=3.10" in metadata
    for minor in (10, 11, 12, 13):
        assert f"Classifier: Programming Language :: Python :: 3.{minor}\n" in metadata
    assert "Project-URL: Repository, https://" in metadata
    assert "Provides-Extra: lab" not in metadata
    assert "Provides-Extra: web" not in metadata
    assert "litegate.commands" not in entry_points  # the lab registers those


def test_the_sdist_holds_the_product_only(dists: dict[str, Path]) -> None:
    version = litegate.__version__
    with tarfile.open(dists["sdist"]) as sdist:
        members = [m for m in sdist.getmembers() if m.isfile()]
        names = [m.name for m in members]
        sources = {}
        for m in members:
            if m.name.endswith(".py"):
                f = sdist.extractfile(m)
                assert f is not None
                sources[m.name] = f.read().decode()
    assert {n.split("/")[0] for n in names} == {f"litegate-{version}"}
    inside = [n.split("/", 1)[1] for n in names]
    assert _lab_members(inside, sources) == []
    assert not [n for n in inside if n.startswith(("tests/", "demo/", "docs/"))]
    assert "src/litegate/_database.py" in inside
    assert "src/litegate/py.typed" in inside
    assert "README.md" in inside


def test_the_wheel_alone_runs_the_readme_example(dists: dict[str, Path], tmp_path: Path) -> None:
    fresh = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True, timeout=120
    )
    python = fresh / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", "--disable-pip-version-check", str(dists["wheel"])],
        capture_output=True, text=True, timeout=300, check=False, env=_clean_env(),
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr

    def run(*argv: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=120, check=False,
            cwd=cwd, env=_clean_env(),
        )  # fmt: skip

    # nothing in there but litegate (the venv has no pip, no setuptools)
    listed = run(
        str(python), "-I", "-c",
        "import json, importlib.metadata as m; "
        "print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))",
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == ["litegate"]

    # the README's first example, as a user would paste it into a file
    work = tmp_path / "work"
    work.mkdir()
    example = work / "example.py"
    example.write_text(
        first_python_block((ROOT / "README.md").read_text())
        + "\nimport litegate as _lg, sys as _sys\nprint(_lg.__file__, _lg.__version__)\n"
    )
    ran = run(str(python), "-I", str(example), cwd=work)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    where, version = ran.stdout.split()[-2:]
    assert Path(where).resolve().is_relative_to(fresh.resolve())  # the wheel, not this checkout
    assert version == litegate.__version__

    # the lab's commands, without the lab: how to get it, and status 2
    for command in (["bench", "fairness", "--quick"], ["web", "seed", "x.db"]):
        answered = run(str(fresh / "bin" / "litegate"), *command)
        assert answered.returncode == 2, answered.stdout + answered.stderr
        assert f"litegate {command[0]} is part of litegate's lab" in answered.stderr
        assert "pip install litegate-lab" in answered.stderr
        assert "Traceback" not in answered.stderr
    helped = run(str(fresh / "bin" / "litegate"), "--help")
    assert helped.returncode == 0, helped.stderr
    assert "(needs litegate-lab)" in helped.stdout
    doctor = run(str(fresh / "bin" / "litegate"), "doctor", str(work / "app.db"), "--json")
    assert doctor.returncode in (0, 1), doctor.stdout + doctor.stderr
    assert "Traceback" not in doctor.stderr


def test_first_python_block_is_the_first() -> None:
    text = "intro\n```sh\nmake\n```\n```python\nx = 1\n```\n```python\ny = 2\n```\n"
    assert first_python_block(text) == "x = 1\n"
