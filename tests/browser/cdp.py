#!/usr/bin/python3
"""Headless Chromium driven over the Chrome DevTools protocol (its own
WebSocket) with python3-websockets: no driver binary, no downloads. Shared by
the browser tests (chat_browser.py, sse_browser.py, status_browser.py,
showcase_browser.py).

    import cdp
    def scenario(c, base): ...               # async: pages via cdp.Page.open
    sys.exit(cdp.main_with_server(argv, binary, args, scenario, "what"))

or, for a test with its own server handling: find_chromium, start_chromium,
Cdp.connect, Page.open, stop_group.
"""

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77  # the exit code ctest's scripts treat as "skipped"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

try:
    import websockets
except ImportError:  # pragma: no cover
    websockets = None


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def available():
    """Whether the browser tests can run (Chromium and python3-websockets)."""
    return find_chromium() is not None and websockets is not None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_dir_from(argv):
    return (argv[1] if len(argv) > 1 else os.environ.get("FLARE_BUILD_DIR")
            or os.path.join(REPO, "build"))


class Cdp:
    """A minimal Chrome DevTools protocol client: commands by id, sessions
    for pages (flattened); events go to the list of their session in
    self.events (when one was registered), others are ignored."""

    def __init__(self, ws):
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending = {}
        self.events = {}
        self.reader = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, url):
        ws = await websockets.connect(url, max_size=64 << 20, compression=None)
        return cls(ws)

    async def _read(self):
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                if "id" not in msg and "method" in msg:
                    sink = self.events.get(msg.get("sessionId"))
                    if sink is not None:
                        sink.append(msg)
                    continue
                fut = self.pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except websockets.ConnectionClosed:
            pass
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("DevTools connection closed"))

    async def send(self, method, params=None, session=None, timeout=20):
        i = next(self.ids)
        msg = {"id": i, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        fut = asyncio.get_running_loop().create_future()
        self.pending[i] = fut
        await self.ws.send(json.dumps(msg))
        res = await asyncio.wait_for(fut, timeout)
        if "error" in res:
            raise RuntimeError("%s: %s" % (method, res["error"]))
        return res.get("result", {})

    async def close(self):
        await self.ws.close()
        self.reader.cancel()


class Page:
    """One tab. Subclasses may override describe() to say what the page shows
    when a wait times out."""

    def __init__(self, cdp, target, session, name):
        self.cdp, self.target, self.session, self.name = cdp, target, session, name
        self.events = []
        cdp.events[session] = self.events

    async def watch(self):
        """Records what goes wrong from now on (problems()): console errors,
        uncaught exceptions, failed requests and answers >= 400."""
        await self.call("Network.enable")
        await self.call("Log.enable")

    def problems(self):
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.%s: %s" % (p["type"], " ".join(
                    str(a.get("value", a.get("description", ""))) for a in p.get("args", []))))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: %s" % d.get("exception", {}).get("description", d.get("text")))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: %s %s" % (p["entry"].get("text"), p["entry"].get("url", "")))
            elif m == "Network.loadingFailed" and not p.get("canceled"):
                out.append("request failed: %s %s" % (p.get("type"), p.get("errorText")))
            elif m == "Network.responseReceived" and p.get("response", {}).get("status", 0) >= 400:
                out.append("HTTP %d: %s" % (p["response"]["status"], p["response"].get("url")))
        return out

    @classmethod
    async def open(cls, cdp, url, name, private=False):
        """A new tab on url. private: in a browser context of its own (its own
        cookies, like a private window)."""
        params = {"url": "about:blank"}
        if private:
            ctx = await cdp.send("Target.createBrowserContext")
            params["browserContextId"] = ctx["browserContextId"]
        t = await cdp.send("Target.createTarget", params)
        s = await cdp.send("Target.attachToTarget", {"targetId": t["targetId"], "flatten": True})
        page = cls(cdp, t["targetId"], s["sessionId"], name)
        await page.call("Page.enable")
        await page.call("Runtime.enable")
        await page.call("Page.navigate", {"url": url})
        return page

    async def call(self, method, params=None):
        return await self.cdp.send(method, params, self.session)

    async def navigate(self, url):
        await self.call("Page.navigate", {"url": url})

    async def js(self, expr):
        r = await self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                                 "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError("%s: %s" % (self.name, r["exceptionDetails"]))
        return r["result"].get("value")

    async def describe(self):
        try:
            text = await self.js("document.body ? document.body.innerText : ''") or ""
        except RuntimeError as e:
            return str(e)
        return text[:2000]

    async def wait(self, expr, what, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if await self.js(expr):
                    return
            except RuntimeError:
                pass  # page still loading
            await asyncio.sleep(0.05)
        shown = await self.describe()
        raise AssertionError("%s: timed out waiting for %s; page shows %r" % (self.name, what, shown))

    async def type_into(self, selector, text):
        """Types like a person: focus the element, insert the text."""
        await self.js("document.querySelector(%s).focus()" % json.dumps(selector))
        await self.call("Input.insertText", {"text": text})

    async def click(self, selector):
        await self.js("document.querySelector(%s).click()" % json.dumps(selector))

    async def screenshot(self, path):
        r = await self.call("Page.captureScreenshot", {"format": "png"})
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))

    async def close(self):
        await self.cdp.send("Target.closeTarget", {"targetId": self.target})


def start_chromium(chromium, profile):
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-dev-shm-usage", "--no-proxy-server",
            "--user-data-dir=" + profile, "--remote-debugging-port=0", "about:blank"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("chromium exited with %s" % proc.returncode)
        try:
            with open(port_file) as f:
                lines = f.read().split()
            if len(lines) >= 2:
                return proc, "ws://127.0.0.1:%s%s" % (lines[0], lines[1])
        except OSError:
            pass
        time.sleep(0.1)
    stop_group(proc)
    raise RuntimeError("chromium did not open its DevTools port")


def stop_group(proc):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(5)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def start_server(binary, args, what):
    """Starts binary --listen 127.0.0.1:<free port> ARGS; returns (proc, port,
    log) once the port accepts connections."""
    if not os.access(binary, os.X_OK):
        raise RuntimeError("%s not built: %s" % (what, binary))
    port = free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:%d" % port] + list(args),
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port, log
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    log.seek(0)
    raise RuntimeError("%s did not start: %s" % (what, log.read().decode(errors="replace")))


def run_scenario(url, scenario, *args, timeout=120):
    """Connects to the browser at url and runs `await scenario(cdp, *args)`."""

    async def run():
        c = await Cdp.connect(url)
        try:
            await scenario(c, *args)
        finally:
            await c.close()

    asyncio.run(asyncio.wait_for(run(), timeout))


def main_with_server(argv, binary, args, scenario, what, ok_message, check_sigterm=True):
    """The whole life of a browser test against one example server: skip
    (SKIP) without Chromium or python3-websockets, start the server and the
    browser, run `await scenario(cdp, base_url)`, check the server is alive
    and (check_sigterm) exits 0 on SIGTERM, clean up; the server's output is
    shown when it failed. Returns the exit code."""
    chromium = find_chromium()
    if chromium is None or websockets is None:
        print("skipped: needs chromium and python3-websockets (tools/deps.sh test)")
        return SKIP
    profile = tempfile.mkdtemp(prefix="flare-chromium-")
    server, port, log = start_server(binary, args, what)
    browser = None
    failed = True
    try:
        browser, url = start_chromium(chromium, profile)
        run_scenario(url, scenario, "http://127.0.0.1:%d" % port)
        if server.poll() is not None:
            raise AssertionError("%s died" % what)
        if check_sigterm:
            server.send_signal(signal.SIGTERM)
            rc = server.wait(10)
            if rc != 0:
                raise AssertionError("%s exited %s on SIGTERM" % (what, rc))
        print(ok_message)
        failed = False
        return 0
    finally:
        if browser is not None:
            stop_group(browser)
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        if failed or server.returncode not in (0, None, -signal.SIGTERM):
            log.seek(0)
            sys.stderr.write(log.read().decode(errors="replace"))
        log.close()
        shutil.rmtree(profile, ignore_errors=True)
