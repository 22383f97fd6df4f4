"""Headless Chromium driven over the DevTools protocol on a pipe (stdlib only).

``--remote-debugging-pipe`` makes Chromium read protocol messages from fd 3
and write its answers and events to fd 4, each a JSON object ended by a NUL
byte. That is enough to open a page, hear every console message, uncaught
exception and failed load at the level Chromium gives it (the
``--enable-logging`` output does not say which were errors), read the page's
text and take a screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

BROWSER = "chromium"


def available() -> str | None:
    """The Chromium binary's path, or None where it is not installed."""
    return shutil.which(BROWSER)


@dataclass
class PageReport:
    url: str
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, failed loads
    text_chars: int = 0  # characters of the rendered body's text
    png: bytes = b""


class Browser:
    """One headless Chromium process; ``with Browser() as b: b.visit(url)``."""

    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 60.0) -> None:
        path = available()
        if path is None:
            raise RuntimeError(f"{BROWSER} is not installed")
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="litegate-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        args = [
            path,
            "--headless",
            "--remote-debugging-pipe",
            f"--user-data-dir={self._profile.name}",
            f"--window-size={width},{height}",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--hide-scrollbars",
            "--mute-audio",
        ]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox

        def to_fds_3_and_4() -> None:
            # Duplicate first, so that a pipe end that is already fd 3 or 4
            # is not overwritten before it is moved.
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [*args, "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=to_fds_3_and_4,
            pass_fds=(3, 4),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    # -- the protocol ------------------------------------------------------

    def _send(self, method: str, params: dict[str, Any] | None = None,
              session: str | None = None) -> int:  # fmt: skip
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        return self._next_id

    def _read(self, deadline: float) -> dict[str, Any] | None:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._from_chrome], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe (it exited)")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg: dict[str, Any] = json.loads(raw)
        return msg

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Send one command and return its result; events seen meanwhile are kept."""
        want = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._read(deadline)
            if msg is None:
                raise TimeoutError(f"no answer from chromium to {method} in {self.timeout} s")
            if msg.get("id") == want:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            self._events.append(msg)

    def _wait_event(self, method: str, session: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self._events):
                if ev.get("method") == method and ev.get("sessionId") == session:
                    del self._events[i]
                    return True
            msg = self._read(deadline)
            if msg is None:
                return False
            self._events.append(msg)

    def _drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (msg := self._read(deadline)) is not None:
            self._events.append(msg)

    # -- a page ------------------------------------------------------------

    def visit(self, url: str, settle: float = 0.5) -> PageReport:
        """Open ``url`` in a new tab, wait for its load event (and ``settle``
        seconds more for late errors), and report what happened."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        try:
            for domain in ("Page", "Runtime", "Log"):
                self.call(f"{domain}.enable", session=session)
            self._events.clear()
            nav = self.call("Page.navigate", {"url": url}, session=session)
            report = PageReport(url)
            if "errorText" in nav:
                report.errors.append(f"navigation failed: {nav['errorText']}")
                return report
            if not self._wait_event("Page.loadEventFired", session, self.timeout):
                report.errors.append(f"no load event within {self.timeout} s")
            self._drain(settle)
            report.errors += errors_in(e for e in self._events if e.get("sessionId") == session)
            value = self.call(
                "Runtime.evaluate",
                {"expression": "document.body ? document.body.innerText.trim().length : 0",
                 "returnByValue": True},
                session=session,
            )["result"].get("value", 0)  # fmt: skip
            report.text_chars = int(value)
            shot = self.call("Page.captureScreenshot", {"format": "png"}, session=session)
            report.png = base64.b64decode(shot["data"])
            return report
        finally:
            self.call("Target.closeTarget", {"targetId": target})

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(OSError, RuntimeError, TimeoutError):
                    self.call("Browser.close")
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()  # our own child, by its PID
                    self.proc.wait()
        finally:
            for fd in (self._to_chrome, self._from_chrome):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def errors_in(events: Any) -> list[str]:
    """The console errors, uncaught exceptions and failed loads among DevTools events."""
    found = []
    for ev in events:
        method, p = ev.get("method"), ev.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
            found.append(f"console.{p['type']}: {args}")
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            found.append(f"uncaught: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            found.append(f"{e.get('source')}: {e.get('text')} {e.get('url', '')}".rstrip())
    return found
