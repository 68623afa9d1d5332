#!/usr/bin/python3
"""The chat example driven in headless Chromium, as a person would use it:
three pages (alice and bob in #lobby, carol in #other) load the page from
the example server, connect their WebSocket, type messages and read what the
others wrote. Rooms keep #other quiet; carol switching rooms and bob leaving
show up as events. Chromium is driven over the DevTools protocol (its own
WebSocket) with python3-websockets; no driver binary, no downloads.

    /usr/bin/python3 tests/browser/chat_browser.py [BUILD_DIR]

Exits 0 when every check passes, 77 when Chromium or python3-websockets is
missing (skipped), 1 otherwise. FLARE_SCREENSHOT_DIR=<dir> keeps a PNG of
each page at the end.
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

SKIP = 77
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cdp:
    """A minimal Chrome DevTools protocol client: commands by id, sessions
    for pages (flattened), events ignored."""

    def __init__(self, ws):
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending = {}
        self.reader = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, url):
        ws = await websockets.connect(url, max_size=64 << 20, compression=None)
        return cls(ws)

    async def _read(self):
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
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
    def __init__(self, cdp, target, session, name):
        self.cdp, self.target, self.session, self.name = cdp, target, session, name

    @classmethod
    async def open(cls, cdp, url, name):
        t = await cdp.send("Target.createTarget", {"url": "about:blank"})
        s = await cdp.send("Target.attachToTarget", {"targetId": t["targetId"], "flatten": True})
        page = cls(cdp, t["targetId"], s["sessionId"], name)
        await page.call("Page.enable")
        await page.call("Runtime.enable")
        await page.call("Page.navigate", {"url": url})
        return page

    async def call(self, method, params=None):
        return await self.cdp.send(method, params, self.session)

    async def js(self, expr):
        r = await self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                                 "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError("%s: %s" % (self.name, r["exceptionDetails"]))
        return r["result"].get("value")

    async def wait(self, expr, what, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if await self.js(expr):
                    return
            except RuntimeError:
                pass  # page still loading
            await asyncio.sleep(0.05)
        lines = await self.lines()
        raise AssertionError("%s: timed out waiting for %s; page shows %r" % (self.name, what, lines))

    async def lines(self):
        return await self.js("Array.from(document.querySelectorAll('#messages li'))"
                             ".map(li => li.textContent)") or []

    async def wait_line(self, text, timeout=15):
        await self.wait("Array.from(document.querySelectorAll('#messages li'))"
                        ".some(li => li.textContent === %s)" % json.dumps(text),
                        "the line %r" % text, timeout)

    async def say(self, text):
        # type like a person: focus the box, insert the text, press Send
        await self.js("document.getElementById('text').focus()")
        await self.call("Input.insertText", {"text": text})
        await self.js("document.querySelector('#form button').click()")

    async def screenshot(self, path):
        r = await self.call("Page.captureScreenshot", {"format": "png"})
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))


async def scenario(cdp, base, shots):
    alice = await Page.open(cdp, base + "/?name=alice&room=lobby", "alice")
    bob = await Page.open(cdp, base + "/?name=bob&room=lobby", "bob")
    carol = await Page.open(cdp, base + "/?name=carol&room=other", "carol")
    for p in (alice, bob, carol):
        await p.wait("document.body.dataset.state === 'open'", "the WebSocket to open")
    # the page was served by the example: its title and script ran
    assert await alice.js("document.title") == "Flare chat"
    await alice.wait_line("bob joined #lobby.")

    await alice.say("hello from alice")
    await bob.wait_line("alice: hello from alice")
    await alice.wait_line("alice: hello from alice")  # own message, through the server
    await bob.say("hi alice, bob here ✓ <b>not bold</b>")
    await alice.wait_line("bob: hi alice, bob here ✓ <b>not bold</b>")
    bold = await alice.js("document.querySelectorAll('#messages li b').length")
    assert bold == 2, "markup in a message must stay text (%r)" % bold

    await asyncio.sleep(0.3)
    carol_lines = await carol.lines()
    assert not any("hello from alice" in l for l in carol_lines), carol_lines

    await carol.say("/join lobby")
    await alice.wait_line("carol joined #lobby.")
    await carol.say("carol arrives")
    await bob.wait_line("carol: carol arrives")

    if shots:
        for p in (alice, bob, carol):
            await p.screenshot(os.path.join(shots, "chat-%s.png" % p.name))

    await cdp.send("Target.closeTarget", {"targetId": bob.target})
    await alice.wait_line("bob left #lobby.")


def start_server(build_dir):
    binary = os.path.join(build_dir, "examples", "chat")
    if not os.access(binary, os.X_OK):
        raise RuntimeError("chat example not built: %s" % binary)
    port = free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:%d" % port, "--workers", "2",
                             "--static", os.path.join(REPO, "examples", "chat", "static")],
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
    log.seek(0)
    raise RuntimeError("chat did not start: %s" % log.read().decode(errors="replace"))


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


def main():
    build_dir = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FLARE_BUILD_DIR")
                 or os.path.join(REPO, "build"))
    chromium = find_chromium()
    if chromium is None or websockets is None:
        print("skipped: needs chromium and python3-websockets (tools/deps.sh test)")
        return SKIP
    shots = os.environ.get("FLARE_SCREENSHOT_DIR")
    profile = tempfile.mkdtemp(prefix="flare-chromium-")
    server, port, log = start_server(build_dir)
    browser = None
    try:
        browser, url = start_chromium(chromium, profile)

        async def run():
            cdp = await Cdp.connect(url)
            try:
                await scenario(cdp, "http://127.0.0.1:%d" % port, shots)
            finally:
                await cdp.close()

        asyncio.run(asyncio.wait_for(run(), 120))
        if server.poll() is not None:
            raise AssertionError("chat server died")
        server.send_signal(signal.SIGTERM)
        rc = server.wait(10)
        if rc != 0:
            raise AssertionError("chat server exited %s on SIGTERM" % rc)
        print("chat in chromium: ok")
        return 0
    finally:
        if browser is not None:
            stop_group(browser)
        if server.poll() is None:
            server.kill()
            server.wait()
        if server.returncode not in (0, None):
            log.seek(0)
            sys.stderr.write(log.read().decode(errors="replace"))
        log.close()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
