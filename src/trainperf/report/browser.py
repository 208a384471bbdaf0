"""Open a report page in headless chromium and read back what a person would check: the sections
that rendered, whether each image decoded, console errors, requests that left the machine, and a
screenshot.

Chromium is driven over its DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON messages,
each ended by a NUL byte, on file descriptors 3 and 4), so nothing beyond the standard library and
Debian's `chromium` package is needed: no websocket client, no driver binary to match the browser.
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

from trainperf.errors import BrowserError

_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# Flags that work as root in a container without a display, a GPU or a network; the profile is fresh.
_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-extensions", "--hide-scrollbars", "--remote-debugging-pipe")

# Run in the page after its load event: waits until every image has decoded (or failed), then
# describes each <h2> section and each image as laid out.
_INSPECT = """
Promise.all([...document.images].map(im => im.decode().catch(() => null))).then(() => ({
  title: document.title,
  sections: [...document.querySelectorAll('h2')].map(h => {
    const body = h.nextElementSibling;
    return {title: h.textContent.trim(), height: h.getBoundingClientRect().height,
            body_height: body ? body.getBoundingClientRect().height : 0,
            body_text: body ? body.innerText.trim().length : 0,
            images: body ? body.querySelectorAll('img').length : 0};
  }),
  images: [...document.images].map(im => ({alt: im.alt, natural_width: im.naturalWidth,
                                           natural_height: im.naturalHeight, width: im.width,
                                           complete: im.complete})),
}))
"""


@dataclass
class PageCheck:
    title: str
    sections: list[dict]  # per <h2>: title, height, body_height, body_text (chars), images
    images: list[dict]  # per <img>: alt, natural_width, natural_height, width, complete
    console_errors: list[str] = field(default_factory=list)  # console.error, uncaught exceptions, log errors
    requests: list[str] = field(default_factory=list)  # URLs requested that are not file: or data:
    png: bytes | None = None  # full-page screenshot when asked for


def find_browser() -> str | None:
    for name in _NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class _Pipe:
    """One chromium process and its DevTools pipe."""

    def __init__(self, browser: str, profile: str, timeout: float) -> None:
        to_child, self._w = os.pipe()
        self._r, from_child = os.pipe()

        def fds() -> None:  # fd 3: commands in, fd 4: replies out (dup'ed so they survive exec)
            a, b = os.dup(to_child), os.dup(from_child)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([browser, *_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err,
                                     preexec_fn=fds, close_fds=False)
        os.close(to_child)
        os.close(from_child)
        self._deadline = time.monotonic() + timeout
        self._buf = b""
        self._next = 0
        self.events: list[dict] = []

    def stderr_tail(self) -> str:
        self._err.seek(0)
        return self._err.read().decode("utf-8", "replace")[-400:]

    def _message(self) -> dict:
        while b"\0" not in self._buf:
            left = self._deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise BrowserError(f"chromium did not answer in time: {self.stderr_tail()}")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium exited (code {self.proc.poll()}): {self.stderr_tail()}")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self._w, json.dumps(msg).encode() + b"\0")
        except BrokenPipeError:
            raise BrowserError(f"chromium exited (code {self.proc.poll()}): {self.stderr_tail()}") from None
        while True:
            reply = self._message()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        while True:
            for i, ev in enumerate(self.events):
                if ev.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._message())

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except BrowserError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._r)
        os.close(self._w)
        self._err.close()


def _console_errors(events: list[dict]) -> list[str]:
    out = []
    for ev in events:
        m, p = ev.get("method"), ev.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            out.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append(p["entry"].get("text", ""))
    return out


def check_page(page: Path, width: int = 1280, height: int = 2400, screenshot: bool = False,
               timeout: float = 60.0) -> PageCheck:
    """Load `page` (a local HTML file) at width x height CSS pixels and inspect it after load."""
    browser = find_browser()
    if browser is None:
        raise BrowserError("no chromium found (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        pipe = _Pipe(browser, profile, timeout)
        try:
            target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                pipe.call(f"{domain}.enable", session=session)
            pipe.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
            nav = pipe.call("Page.navigate", {"url": Path(page).resolve().as_uri()}, session=session)
            if nav.get("errorText"):
                raise BrowserError(f"{page}: {nav['errorText']}")
            pipe.wait_for("Page.loadEventFired")
            res = pipe.call("Runtime.evaluate", {"expression": _INSPECT, "awaitPromise": True,
                                                 "returnByValue": True}, session=session)
            if "exceptionDetails" in res:
                raise BrowserError(f"inspecting {page} failed: {res['exceptionDetails'].get('text')}")
            info = res["result"]["value"]
            png = None
            if screenshot:
                shot = pipe.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                                 session=session)
                png = base64.b64decode(shot["data"])
            events = list(pipe.events)
        finally:
            pipe.close()
    requests = [ev["params"]["request"]["url"] for ev in events if ev.get("method") == "Network.requestWillBeSent"]
    return PageCheck(title=info["title"], sections=info["sections"], images=info["images"],
                     console_errors=_console_errors(events),
                     requests=[u for u in requests if not u.startswith(("file:", "data:"))], png=png)
