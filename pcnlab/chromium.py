"""A headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON
messages ended by NUL on file descriptors 3 and 4), with nothing but the standard library: open a
page, evaluate JavaScript in it, collect its console errors and uncaught exceptions, read its paint
timings and take a screenshot. What the tests and bench/bench_view.py load `pcnlab view`'s pages with.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("chromium", "chromium-browser", "google-chrome")


def chromium_binary() -> str | None:
    """The Chromium on PATH (Debian's package is `chromium`), or None."""
    return next((found for name in BINARIES if (found := shutil.which(name))), None)


@dataclass
class Page:
    """One headless Chromium with one page open. Use as a context manager; the browser and its
    profile folder are removed on exit."""

    width: int = 1600
    height: int = 1000
    timeout_s: float = 60.0
    errors: list[str] = field(default_factory=list)    # console errors and uncaught exceptions, in order

    def __enter__(self) -> "Page":
        binary = chromium_binary()
        if binary is None:
            raise FileNotFoundError("chromium not found (make deps installs Debian's chromium package)")
        self._profile = tempfile.mkdtemp(prefix="pcnlab-chromium-")
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()

        def onto_3_and_4():  # the browser reads commands on fd 3 and writes answers on fd 4
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        self._proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--remote-debugging-pipe", f"--user-data-dir={self._profile}",
             f"--window-size={self.width},{self.height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=onto_3_and_4, close_fds=False)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self._session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.call("Browser.close")
        except (OSError, TimeoutError, RuntimeError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._read, self._write):
            os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    # --- the protocol ---------------------------------------------------------------------------

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _note(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append("exception: " + str(details.get("exception", {}).get("description", details.get("text"))))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append("log: " + params["entry"].get("text", ""))
        self._events.append(message)

    def call(self, method: str, session: bool = False, **params) -> dict:
        """Send one command and wait for its answer; events that arrive meanwhile are noted."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            answer = self._receive(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self._note(answer)

    # --- what a test asks -----------------------------------------------------------------------

    def open(self, path: Path | str) -> None:
        """Load a file and wait for its load event."""
        self._events.clear()
        self.call("Page.navigate", session=True, url=Path(path).resolve().as_uri())
        deadline = time.monotonic() + self.timeout_s
        while not any(e.get("method") == "Page.loadEventFired" for e in self._events):
            self._note(self._receive(deadline))

    def evaluate(self, expression: str, timeout_s: float | None = None):
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                           awaitPromise=True, **({"timeout": timeout_s * 1000} if timeout_s else {}))
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}...: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0, every_s: float = 0.05):
        """Poll until `expression` is truthy; returns its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still false after {timeout_s} s: {expression}")
            time.sleep(every_s)

    def screenshot(self, out: Path | str) -> Path:
        data = self.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True)["data"]
        Path(out).write_bytes(base64.b64decode(data))
        return Path(out)
