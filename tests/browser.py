"""A real headless browser for UI tests: Debian's chromium, driven over its DevTools pipe.

`--dump-dom` renders MLflow's JS app but cannot click, and the runs table shows a parent's
nested runs only after "Expand rows". The DevTools protocol over `--remote-debugging-pipe`
(JSON messages separated by NUL bytes on file descriptors 3 and 4) can, with no websocket
library and no browser download: the pipe is chromium's own, the browser is an apt package.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


class Browser:
    """One headless chromium with one page; `evaluate` runs JavaScript there and returns its value."""

    def __init__(self, binary: str | None = None, timeout_s: float = 120):
        binary = binary or find_chromium()
        if binary is None:
            raise RuntimeError(f"no chromium found ({', '.join(CANDIDATES)}); apt-get install chromium")
        self.timeout_s, self._next_id, self._buffer = timeout_s, 0, b""
        self._profile = tempfile.TemporaryDirectory(prefix="evalsuite-chromium-")
        to_browser, self._in = os.pipe()  # browser reads fd 3, writes fd 4
        self._out, from_browser = os.pipe()
        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}", "about:blank"]
        # The child needs the pipe ends at exactly fds 3 and 4; dup to high numbers first so the
        # two dup2 calls cannot clobber each other.
        high_r, high_w = os.dup(to_browser), os.dup(from_browser)

        def wire() -> None:
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, pass_fds=(3, 4), preexec_fn=wire,
                                     start_new_session=True)
        for fd in (to_browser, from_browser, high_r, high_w):
            os.close(fd)
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._in, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            reply = self._read()
            if reply.get("id") == self._next_id:  # events and other replies are not ours
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
        raise TimeoutError(f"{method}: no reply in {self.timeout_s:.0f} s")

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._out, 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium closed its DevTools pipe (exit code {self.proc.poll()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(line)

    def goto(self, url: str) -> None:
        self.call("Page.navigate", self.session, url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of `expression` (a promise is awaited), as JSON."""
        res = self.call("Runtime.evaluate", self.session, expression=expression, awaitPromise=True,
                        returnByValue=True, timeout=int(self.timeout_s * 1000))
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails'].get('text')} "
                               f"{res['exceptionDetails'].get('exception', {}).get('description', '')}")
        return res["result"].get("value")

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)
        for fd in (self._in, self._out):
            os.close(fd)
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# Polls the page until every `ready` text is shown, then clicks the first element matching the CSS
# selector `click` (if given), then polls until every `needles` text is shown; returns the visible
# text either way.
WAIT_FOR_TEXT = """
(async (ready, click, needles, timeoutMs) => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const deadline = Date.now() + timeoutMs;
  const shows = texts => texts.every(n => document.body && document.body.innerText.includes(n));
  const until = async texts => {
    while (Date.now() < deadline && !shows(texts)) await sleep(250);
    return shows(texts);
  };
  let clicked = null;
  // The ready texts can show before the element to click is rendered (a page's header or description
  // may hold them), so the target is waited for too.
  if (await until(ready) && click) {
    while (Date.now() < deadline && !document.querySelector(click)) await sleep(250);
    const target = document.querySelector(click);
    if (target) { target.click(); clicked = click; }
  }
  const found = await until(needles);
  return {found, clicked, text: document.body ? document.body.innerText : ''};
})
"""


def page_text(browser: Browser, url: str, needles: list[str], ready: list[str] | None = None,
              click: str | None = None, timeout_s: float = 90) -> dict[str, Any]:
    """Open `url`; once `ready` texts show, click the element matching `click`; wait for `needles`."""
    browser.goto(url)
    args = ", ".join(json.dumps(a) for a in (ready or [], click, needles, int(timeout_s * 1000)))
    return browser.evaluate(f"{WAIT_FOR_TEXT}({args})")


def dump_dom(url: str, budget_ms: int = 20000, binary: str | None = None) -> str:
    """`chromium --headless --dump-dom`: the rendered DOM of a page, no interaction."""
    binary = binary or find_chromium()
    with tempfile.TemporaryDirectory(prefix="evalsuite-chromium-") as profile:
        res = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                              f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=180)
    return res.stdout



def screenshot(browser: Browser, path, width: int = 1400, height: int = 900) -> None:
    """A PNG of the page as a `width` x `height` window shows it (the first screen)."""
    import base64

    browser.call("Emulation.setDeviceMetricsOverride", browser.session, width=width, height=height,
                 deviceScaleFactor=1, mobile=False)
    shot = browser.call("Page.captureScreenshot", browser.session, format="png")
    Path(path).write_bytes(base64.b64decode(shot["data"]))


def kept_path(name: str, fallback: Path) -> Path:
    """Where a test keeps a screenshot: $EVALSUITE_SCREENSHOTS (CI collects it) if set, else `fallback`."""
    folder = Path(os.environ.get("EVALSUITE_SCREENSHOTS") or fallback)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name
