"""The documentation site: it builds with warnings as errors (``make docs``),
its API reference documents every public name, and its pages render in a
real browser without a console error.

The browser check serves the built site on 127.0.0.1 and opens the home
page, one guide and one API page in headless Chromium (Debian's
``chromium``; ``make test`` installs it as root where it is missing, and the
check skips with a message elsewhere). Screenshots go to ``results/docs/``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.docs import browser

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "results" / "docs"

# One API page per public package, as mkdocs.yml's nav lists them.
REFERENCE = {
    "litegate": "litegate",
    "litegate.aio": "litegate-aio",
    "litegate.queue": "litegate-queue",
    "litegate.queue.aio": "litegate-queue-aio",
    "litegate.django": "litegate-django",
    "litegate.django.tasks": "litegate-django-tasks",
    "litegate.django.cache": "litegate-django-cache",
    "litegate.sqlalchemy": "litegate-sqlalchemy",
    "litegate.ops": "litegate-ops",
    "litegate.diagnostics": "litegate-diagnostics",
}

# What the browser check opens: the home page, one guide, one API page.
PAGES = {"home": "", "guide-django": "guides/django/", "reference-litegate": "reference/litegate/"}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """``folder`` over HTTP on 127.0.0.1 (a free port); the server is stopped
    and closed on exit."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="docs-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as ``make docs`` builds it (``mkdocs build --strict``)."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: the docs extra (make .venv/.installed installs it)")
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    log = run.stdout + run.stderr
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert warnings == [], "\n".join(warnings)
    return out


def test_every_public_name_is_in_the_api_reference(site: Path) -> None:
    missing = {}
    for module, slug in REFERENCE.items():
        html = (site / "reference" / slug / "index.html").read_text()
        ids = set(re.findall(r'id="([^"]+)"', html))
        names = importlib.import_module(module).__all__
        # litegate.django's names load Django lazily, from litegate.django.base
        lost = [n for n in names if f"{module}.{n}" not in ids and f"{module}.base.{n}" not in ids]
        if lost:
            missing[module] = lost
    assert missing == {}


def test_every_public_class_and_function_has_a_docstring() -> None:
    undocumented = []
    for module in REFERENCE:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            obj = getattr(mod, name)
            is_code = inspect.isclass(obj) or inspect.isroutine(obj)  # not type aliases
            if is_code and not (obj.__doc__ or "").strip():
                undocumented.append(f"{module}.{name}")
    assert undocumented == []


def test_the_site_has_every_page_the_nav_names(site: Path) -> None:
    for md in (ROOT / "docs").rglob("*.md"):
        rel = md.relative_to(ROOT / "docs").with_suffix("")
        page = site / ("" if rel.name == "index" else rel) / "index.html"
        if rel.name == "index":
            page = site / rel.parent / "index.html"
        assert page.is_file(), f"{md} was not built"


def _chromium() -> None:
    if browser.available() is None:
        pytest.skip(
            "chromium is missing: the docs' browser check is skipped "
            "(make test installs Debian's chromium as root with apt-get)"
        )


def test_pages_render_in_chromium_without_console_errors(site: Path) -> None:
    _chromium()
    SHOTS.mkdir(parents=True, exist_ok=True)
    with served(site) as base, browser.Browser() as chromium:
        for name, path in PAGES.items():
            report = chromium.visit(base + path)
            (SHOTS / f"{name}.png").write_bytes(report.png)
            assert report.errors == [], f"{path or '/'}: {report.errors}"
            assert report.text_chars > 500, f"{path or '/'} is (nearly) empty"
            assert report.png.startswith(b"\x89PNG"), f"{path or '/'}: no screenshot"


def test_the_browser_check_sees_console_errors_and_empty_pages(tmp_path: Path) -> None:
    """The check above can fail: the same visit on pages that log an error,
    throw, fail to load a script, or show nothing."""
    _chromium()
    head = '<head><link rel="icon" href="data:,"></head>'  # no request for /favicon.ico
    pages = {
        "logs": "<p>" + "text " * 200 + "</p><script>console.error('boom from the page')</script>",
        "throws": "<p>text</p><script>null.f()</script>",
        "missing": '<p>text</p><script src="nowhere.js"></script>',
        "empty": "",
    }
    for name, body in pages.items():
        (tmp_path / f"{name}.html").write_text(f"<html>{head}<body>{body}</body></html>")
    with served(tmp_path) as base, browser.Browser() as chromium:
        logs = chromium.visit(base + "logs.html")
        throws = chromium.visit(base + "throws.html")
        missing = chromium.visit(base + "missing.html")
        empty = chromium.visit(base + "empty.html")
    assert logs.errors == ["console.error: boom from the page"]
    assert logs.text_chars > 500
    assert len(throws.errors) == 1, throws.errors
    assert throws.errors[0].startswith("uncaught: TypeError"), throws.errors
    assert len(missing.errors) == 1, missing.errors
    assert "404" in missing.errors[0], missing.errors
    assert empty.errors == []
    assert empty.text_chars == 0


def test_the_readme_and_contributing_links_resolve(site: Path) -> None:
    """README.md, CONTRIBUTING.md and CHANGELOG.md link into docs/ by relative
    path (so the links work on GitHub too): each target exists, and each
    anchor into a docs page is an id of the built page."""
    broken = []
    for doc in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md"):
        for target in re.findall(r"\]\(([^)\s]+)\)", (ROOT / doc).read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            if not (ROOT / path).exists():
                broken.append(f"{doc}: {target}")
            elif anchor and path.startswith("docs/") and path.endswith(".md"):
                rel = Path(path).relative_to("docs").with_suffix("")
                page = site / (rel.parent if rel.name == "index" else rel) / "index.html"
                if f'id="{anchor}"' not in page.read_text():
                    broken.append(f"{doc}: {target} (no such anchor)")
    assert broken == []
