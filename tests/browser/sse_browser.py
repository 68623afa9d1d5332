#!/usr/bin/python3
"""Server-sent events in headless Chromium: a page of examples/hello opens
an EventSource on /sse?n=5&ms=50 and must receive the five events (ids 1..5,
data 1..5, in order); when the stream ends the browser reconnects by itself
with Last-Event-ID: 5, and the server's resume gives it nothing twice.
Chromium is driven over the DevTools protocol as in chat_browser.py (whose
client it reuses).

    /usr/bin/python3 tests/browser/sse_browser.py [BUILD_DIR]

Exits 0 when every check passes, 77 when Chromium or python3-websockets is
missing (skipped), 1 otherwise.
"""

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_browser as cb  # noqa: E402

COLLECT = """
window.got = []; window.opens = 0; window.errors = 0;
window.es = new EventSource('/sse?n=5&ms=50');
es.onopen = () => { opens++; };
es.onerror = () => { errors++; };
es.onmessage = (e) => { got.push([e.data, e.lastEventId, e.type]); };
true
"""


async def scenario(cdp, base):
    page = await cb.Page.open(cdp, base + "/plaintext", "sse")
    await page.wait("document.readyState === 'complete'", "the page to load")
    await page.js(COLLECT)
    await page.wait("window.got.length >= 5", "five events")
    got = await page.js("window.got")
    assert got == [[str(i), str(i), "message"] for i in range(1, 6)], got
    # the stream ended: the browser reconnects (Last-Event-ID: 5) and the
    # server resumes after 5, so nothing arrives twice
    await page.wait("window.opens >= 2", "the reconnection", timeout=15)
    await asyncio.sleep(0.3)
    got = await page.js("window.got")
    assert len(got) == 5, got
    await page.js("es.close(); true")


def start_server(build_dir):
    binary = os.path.join(build_dir, "examples", "hello")
    if not os.access(binary, os.X_OK):
        raise RuntimeError("hello not built: %s" % binary)
    port = cb.free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:%d" % port, "--workers", "2"],
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
    raise RuntimeError("hello did not start: %s" % log.read().decode(errors="replace"))


def main():
    build_dir = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FLARE_BUILD_DIR")
                 or os.path.join(cb.REPO, "build"))
    chromium = cb.find_chromium()
    if chromium is None or cb.websockets is None:
        print("skipped: needs chromium and python3-websockets (tools/deps.sh test)")
        return cb.SKIP
    profile = tempfile.mkdtemp(prefix="flare-chromium-")
    server, port, log = start_server(build_dir)
    browser = None
    try:
        browser, url = cb.start_chromium(chromium, profile)

        async def run():
            cdp = await cb.Cdp.connect(url)
            try:
                await scenario(cdp, "http://127.0.0.1:%d" % port)
            finally:
                await cdp.close()

        asyncio.run(asyncio.wait_for(run(), 120))
        if server.poll() is not None:
            raise AssertionError("hello died")
        server.send_signal(signal.SIGTERM)
        rc = server.wait(10)
        if rc != 0:
            raise AssertionError("hello exited %s on SIGTERM" % rc)
        print("EventSource in chromium: ok")
        return 0
    finally:
        if browser is not None:
            cb.stop_group(browser)
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
